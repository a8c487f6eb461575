"""Checkpoint records, OFFSET files, RocksDB checkpoints of store dirs, and the store lock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from millpond.changelog import local
from millpond.changelog.checkpoint import (
    Checkpoint,
    StoreOffset,
    clear_offset_file,
    read_offset_file,
    write_offset_file,
)
from millpond.changelog.errors import CheckpointError, StoreLockedError
from millpond.stores import RocksDbEngine


def test_checkpoint_round_trip_and_garbage() -> None:
    ckpt = Checkpoint("partition-3", 3, {"in": 42}, {"counts": 7})
    assert Checkpoint.from_bytes(ckpt.to_bytes()) == ckpt
    with pytest.raises(CheckpointError, match="topic\\[0\\]@5"):
        Checkpoint.from_bytes(b"{nope", "topic[0]@5")
    with pytest.raises(CheckpointError, match="topic\\[0\\]@6"):  # not UTF-8
        Checkpoint.from_bytes(b"\xff\xfe\x80{", "topic[0]@6")


def test_offset_file_is_atomic_and_checked(tmp_path: Path) -> None:
    assert read_offset_file(tmp_path) is None
    so = StoreOffset("counts", "t", 1, 99)
    write_offset_file(tmp_path, so)
    assert read_offset_file(tmp_path) == so
    assert [p.name for p in tmp_path.iterdir()] == ["OFFSET"], "no temp file left behind"
    (tmp_path / "OFFSET").write_text("garbage")
    with pytest.raises(CheckpointError, match="corrupt OFFSET"):
        read_offset_file(tmp_path)
    # Binary garbage (not UTF-8) is corrupt the same way, not a UnicodeDecodeError (#35).
    for data in (b"\xff\xfe\x00\x81garbage", bytes(range(256)), b"\x80" * 3):
        (tmp_path / "OFFSET").write_bytes(data)
        with pytest.raises(CheckpointError, match="corrupt OFFSET"):
            read_offset_file(tmp_path)
    clear_offset_file(tmp_path)
    clear_offset_file(tmp_path)
    assert read_offset_file(tmp_path) is None


def test_checkpoint_dir_is_independent_of_the_live_store(tmp_path: Path) -> None:
    live = local.store_dir(tmp_path, "job", "counts", 0)
    live.mkdir(parents=True)
    engine = RocksDbEngine(live)
    engine.put(b"a", b"1")
    engine.flush()
    tmp = live.with_name("tmp-ckpt")
    engine.checkpoint(tmp)
    write_offset_file(tmp, StoreOffset("counts", "t", 0, 5))
    local.install_checkpoint(tmp, live)
    engine.put(b"a", b"2")  # written after the checkpoint: must not show up in it
    engine.put(b"b", b"3")
    engine.close()
    assert local.replace_with_checkpoint(live)
    reopened = RocksDbEngine(live)
    assert reopened.get(b"a") == b"1" and reopened.get(b"b") is None
    reopened.put(b"c", b"4")
    reopened.flush()
    reopened.close()
    ckpt = RocksDbEngine(local.checkpoint_dir(live))
    assert ckpt.get(b"c") is None, "writes to the live copy never reach the checkpoint"
    ckpt.close()
    assert read_offset_file(local.checkpoint_dir(live)) == StoreOffset("counts", "t", 0, 5)


def test_store_lock_refuses_a_second_process(tmp_path: Path) -> None:
    live = local.store_dir(tmp_path, "job", "counts", 0)
    lock = local.StoreLock(live)
    lock.acquire()
    code = ("import sys; from pathlib import Path; from millpond.changelog import local\n"
            f"local.StoreLock(Path({str(live)!r})).acquire()")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert other.returncode != 0
    assert f"in use by pid {os.getpid()}" in other.stderr
    lock.release()
    again = local.StoreLock(live)
    again.acquire()
    again.release()
    with pytest.raises(StoreLockedError):
        first, second = local.StoreLock(live), local.StoreLock(live)
        first.acquire()
        try:
            second.acquire()
        finally:
            first.release()


def test_spark_dir_writer_locks_every_partition_first(tmp_path: Path) -> None:
    """A store directory held by a task stops a rebuild before it writes anything, naming
    the holder's pid, and keeps none of the locks it took (#35)."""
    from millpond.spark.errors import StateDirError
    from millpond.spark.localdirs import DirWriter, partition_dirs
    from millpond.stores import RocksDbOptions

    dirs = partition_dirs(tmp_path, "job", "counts", [0, 1])
    held = local.StoreLock(dirs[1])
    held.acquire()
    writer = DirWriter("counts", "t", RocksDbOptions(), dirs)
    try:
        with pytest.raises(StateDirError, match=f"'counts'.*nothing changed.*in use by pid "
                                                f"{os.getpid()}"):
            writer.lock()
    finally:
        held.release()
    assert not dirs[0].exists() and not dirs[1].exists()
    again = local.StoreLock(dirs[0])  # partition 0's lock was given back
    again.acquire()
    again.release()

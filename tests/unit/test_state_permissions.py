"""job.state.permissions: its parsing, and the modes the real code paths give what they write
(store locks, RocksDB stores and checkpoints, OFFSET files, Spark's rebuilt directories, a
``file://`` backup location), whatever the umask."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from millpond.backup.location import BackupLocation
from millpond.backup.uploader import stage_checkpoint
from millpond.changelog import local
from millpond.changelog.checkpoint import OFFSET_FILE, StoreOffset, write_offset_file
from millpond.config import Config, ConfigError, StoreConfig
from millpond.spark.localdirs import DirWriter, partition_dirs
from millpond.stores import RocksDbEngine, RocksDbOptions, permissions
from millpond.tasks.storage import open_engine

BASE = ("job.name=j\ntask.class=a.B\ntask.inputs=kafka.t\nsystems.kafka.bootstrap.servers=x:1\n"
        "stores.s.factory=rocksdb\nstores.s.key.serde=string\nstores.s.msg.serde=json\n")


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # the usual one: it alone would leave everything readable by others
    try:
        yield
    finally:
        os.umask(old)


def tree_modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode)
            for p in [root, *root.rglob("*")]}


def assert_tree(root: Path, dir_mode: int) -> dict[str, int]:
    found = tree_modes(root)
    want = {rel: dir_mode if (root / rel).is_dir() else permissions.file_mode(dir_mode)
            for rel in found}
    assert found == want
    return found


# ---- the key ---------------------------------------------------------------------------------

def load(tmp_path: Path, value: str | None) -> Config:
    path = tmp_path / "job.properties"
    extra = "" if value is None else f"job.state.permissions={value}\n"
    path.write_text(BASE + extra)
    return Config.load(path, (), env={})


@pytest.mark.parametrize(("text", "mode"), [(None, 0o750), ("0700", 0o700), ("770", 0o770),
                                             ("0o750", 0o750), (" 0755 ", 0o755)])
def test_the_mode_is_read_as_octal(tmp_path: Path, text: str | None, mode: int) -> None:
    assert load(tmp_path, text).job.state_permissions == mode


@pytest.mark.parametrize(("text", "says"), [
    ("750x", "expected an octal mode such as 0750, got '750x'"),
    ("0x1e8", "expected an octal mode"),
    ("0790", "expected an octal mode"),
    ("75", "expected an octal mode"),
    ("", "expected an octal mode"),
    ("1750", "sets special bits"),
    ("0550", "does not give the owner rwx"),
    ("0650", "does not give the owner rwx"),
])
def test_a_bad_mode_is_a_config_error_at_its_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert str(info.value).startswith(
        f"{tmp_path / 'job.properties'}:8: job.state.permissions: "), str(info.value)
    assert says in str(info.value)


# ---- the code paths --------------------------------------------------------------------------

def open_store(base: Path, mode: int, partition: int = 0) -> tuple[local.StoreLock, RocksDbEngine]:
    """What a task does first: lock the store partition, open its RocksDB engine."""
    live = local.store_dir(base, "j", "s", partition)
    lock = local.StoreLock(live, mode)
    lock.acquire()
    engine = open_engine(StoreConfig("s", "rocksdb", "string", "json"), live)
    assert isinstance(engine, RocksDbEngine)
    return lock, engine


def commit(engine: RocksDbEngine, live: Path, offset: int) -> None:
    """What a task's commit does to a store's directory (TaskStorage.after_commit)."""
    permissions.apply(live, local.store_mode(live))
    tmp = live.with_name(".ckpt-test")
    engine.checkpoint(tmp)
    so = StoreOffset("s", "c", 0, offset)
    write_offset_file(tmp, so)
    local.install_checkpoint(tmp, live)
    write_offset_file(live, so)


@pytest.mark.parametrize("mode", [0o750, 0o700])
def test_stores_checkpoints_and_offsets_get_the_mode(tmp_path: Path, mode: int) -> None:
    base = tmp_path / "missing" / "state"  # millpond creates <base> too
    lock, engine = open_store(base, mode)
    live = local.store_dir(base, "j", "s", 0)
    try:
        engine.put_all([(f"k{i}".encode(), b"v" * 100) for i in range(1000)])
        engine.flush()  # an SST file
        commit(engine, live, 41)
        # a restore from the checkpoint copies it over the live directory
        engine.close()
        assert local.replace_with_checkpoint(live)
        found = assert_tree(tmp_path / "missing", mode)
    finally:
        engine.close()
        lock.release()
    assert f"state/j/s/partition-0.checkpoint/{OFFSET_FILE}" in found
    assert "state/j/s/partition-0.lock" in found
    assert any(rel.endswith(".sst") for rel in found)


def test_an_older_wider_state_dir_is_narrowed_once_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    live = local.store_dir(tmp_path, "j", "s", 0)
    live.mkdir(parents=True)
    engine = RocksDbEngine(live)  # as an older millpond made it: the umask's modes
    engine.put(b"k", b"v")
    engine.close()
    (live / OFFSET_FILE).write_text("{}")
    assert tree_modes(tmp_path / "j")["s/partition-0/OFFSET"] == 0o644
    assert tree_modes(tmp_path / "j")["."] == 0o755

    with caplog.at_level(logging.INFO, logger="millpond.stores.permissions"):
        for _ in range(2):  # the second lock finds it done: no second line
            lock = local.StoreLock(live)
            lock.acquire()
            lock.release()
    assert_tree(tmp_path / "j", 0o750)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(f"{tmp_path / 'j'} had mode 0755: set it "), lines
    assert "0750 (directories) and 0640 (files)" in lines[0]


def test_an_existing_base_dir_is_left_alone(tmp_path: Path) -> None:
    base = tmp_path / "shared"
    base.mkdir(mode=0o755)
    base.chmod(0o755)
    lock = local.StoreLock(local.store_dir(base, "j", "s", 0), 0o700)
    lock.acquire()
    lock.release()
    assert stat.S_IMODE(base.stat().st_mode) == 0o755
    assert_tree(base / "j", 0o700)


def test_spark_rebuilt_directories_get_the_mode(tmp_path: Path) -> None:
    dirs = partition_dirs(tmp_path / "state", "j", "s", [0, 1])
    writer = DirWriter("s", "c", RocksDbOptions(), dirs, 0o700)
    writer.lock()
    try:
        writer.write(((p, f"k{i}".encode(), b"v") for p in (0, 1) for i in range(100)),
                     {0: 99, 1: 99})
    finally:
        writer.unlock()
    found = assert_tree(tmp_path / "state", 0o700)
    assert f"j/s/partition-1/{OFFSET_FILE}" in found


@pytest.mark.parametrize("mode", [0o750, 0o700])
def test_a_local_backup_location_gets_the_mode(tmp_path: Path, mode: int) -> None:
    state = tmp_path / "state"
    lock, engine = open_store(state, mode)
    live = local.store_dir(state, "j", "s", 0)
    try:
        engine.put_all([(f"k{i}".encode(), b"v" * 100) for i in range(1000)])
        engine.flush()
        commit(engine, live, 7)
        stage = live.with_name("partition-0.backup-x")
        stage_checkpoint(local.checkpoint_dir(live), stage)
        assert_tree(state, mode)
        backups = tmp_path / "backups"  # a missing location: created with the mode
        loc = BackupLocation(f"file://{backups}", "j-1", mode=mode)
        manifest = loc.upload(stage, store="s", topic="c", partition=0, offset=7)
        found = assert_tree(backups, mode)
        assert any(rel.endswith("snapshot.json") for rel in found)
        assert any(rel.endswith(".sst") for rel in found)
        # a download into the state directory (a lost store starting from the snapshot)
        local.wipe(live)
        loc.fetch(manifest.ref(), live)
        assert_tree(state, mode)
    finally:
        engine.close()
        lock.release()


def test_links_are_followed_only_where_the_state_is_placed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A job directory may be a symlink to another disk: its target gets the mode (once, not
    at every open). A symlink inside the state is not followed: its target is not millpond's."""
    disk, outside = tmp_path / "disk", tmp_path / "outside.txt"
    disk.mkdir(mode=0o755)
    disk.chmod(0o755)
    outside.write_text("not millpond's")
    outside.chmod(0o644)
    base = tmp_path / "state"
    base.mkdir()
    (base / "j").symlink_to(disk)
    live = local.store_dir(base, "j", "s", 0)
    with caplog.at_level(logging.INFO, logger="millpond.stores.permissions"):
        for _ in range(2):
            lock = local.StoreLock(live)
            lock.acquire()
            (live.parent / "link").unlink(missing_ok=True)
            (live.parent / "link").symlink_to(outside)
            lock.release()
    assert stat.S_IMODE(disk.stat().st_mode) == 0o750
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
    permissions.apply(live.parent, 0o700, recursive=True)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert stat.S_IMODE(live.parent.stat().st_mode) == 0o700

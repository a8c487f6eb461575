"""millpond.files: atomic file and directory replace, and digests; a checkpoint install
killed at every step leaves the previous checkpoint or the new one."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from millpond import files
from millpond.changelog import local
from millpond.changelog.checkpoint import StoreOffset, read_offset_file, write_offset_file
from millpond.changelog.recovery import LocalState


def test_write_atomically_replaces_with_exact_mode_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    files.write_atomically(target, "one")
    files.write_atomically(target, b"two", 0o600)
    assert target.read_bytes() == b"two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_write_atomically_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    target = tmp_path / "f"
    files.write_atomically(target, "old")
    with pytest.raises(TypeError):
        files.write_atomically(target, 42)  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_digests_equal_hashlib(tmp_path: Path) -> None:
    data = os.urandom(700_000)
    (tmp_path / "f").write_bytes(data)
    assert files.file_digest(tmp_path / "f") == hashlib.sha256(data).hexdigest()
    assert files.stream_digest(io.BytesIO(data)) == (hashlib.sha256(data).hexdigest(), len(data))


def _checkpoint(tmp_path: Path, offset: int) -> Path:
    d = tmp_path / f"staged-{offset}"
    d.mkdir()
    (d / "000001.sst").write_bytes(b"sst %d" % offset)
    write_offset_file(d, StoreOffset("counts", "t", 0, offset))
    return d


# Runs install_checkpoint in a child that SIGKILLs itself just before its Nth file-system
# step (a rename, an fsync, a removal); prints "done" if it got through every step.
_CHILD = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    from millpond.changelog import local
    kill_at, tmp, live = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    count = 0
    def step(fn):
        def wrapped(*a, **k):
            global count
            if count == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            count += 1
            return fn(*a, **k)
        return wrapped
    os.replace = step(os.replace)
    os.fsync = step(os.fsync)
    os.unlink = step(os.unlink)
    shutil.rmtree = step(shutil.rmtree)
    local.install_checkpoint(tmp, live)
    print("done")
""")


def test_install_checkpoint_killed_at_any_step_leaves_old_or_new(tmp_path: Path) -> None:
    steps = 0
    while True:
        case = tmp_path / f"case-{steps}"
        live = local.store_dir(case, "job", "counts", 0)
        live.mkdir(parents=True)
        local.install_checkpoint(_checkpoint(case, 5), live)  # the previous checkpoint
        new = _checkpoint(case, 9)
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(steps), str(new), str(live)],
                              capture_output=True, text=True, timeout=60)
        done = proc.stdout.strip() == "done"
        assert done or proc.returncode == -signal.SIGKILL, proc.stderr
        # Read without changing anything (what recovery observes) ...
        seen = LocalState.read(live).checkpoint.offset
        assert seen is not None and seen.offset in (5, 9), f"killed at step {steps}: {seen}"
        # ... and acted on: the store made a copy of the checkpoint.
        assert local.replace_with_checkpoint(live), f"killed at step {steps}: no checkpoint"
        copied = read_offset_file(live)
        assert copied is not None and copied.offset == seen.offset
        assert (live / "000001.sst").read_bytes() == b"sst %d" % seen.offset
        if done:
            assert seen.offset == 9
            break
        steps += 1
    assert steps >= 4, "the install has at least two renames, a dir fsync and a removal"


def test_install_checkpoint_after_an_interrupted_one(tmp_path: Path) -> None:
    live = local.store_dir(tmp_path, "job", "counts", 0)
    live.mkdir(parents=True)
    ckpt = local.checkpoint_dir(live)
    old = files.old_dir(ckpt)
    os.replace(_checkpoint(tmp_path, 5), old)  # killed between the renames: only .old
    assert local.existing_checkpoint(live) == old
    local.install_checkpoint(_checkpoint(tmp_path, 9), live)
    assert read_offset_file(ckpt) == StoreOffset("counts", "t", 0, 9)
    assert not old.exists()
    local.wipe_checkpoint(live)
    assert local.existing_checkpoint(live) is None

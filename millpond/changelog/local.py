"""Local store directories: where they live, who holds them, and their checkpoints.

A task's store lives in ``<base>/<job>/<store>/partition-<N>``, everything under
``<base>/<job>`` with the job's ``job.state.permissions`` (:mod:`millpond.stores.permissions`;
what is created beside a store takes the mode of the store's directory). Beside it,
``partition-<N>.checkpoint`` is a RocksDB checkpoint (hard-linked SST files) taken at
the last commit, with its own ``OFFSET``. After a crash the live directory may hold
writes past the last commit; the checkpoint never does, so recovery starts from it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import IO

from millpond import files
from millpond.changelog.checkpoint import task_name
from millpond.changelog.errors import StoreLockedError
from millpond.stores import permissions

CHECKPOINT_SUFFIX = ".checkpoint"


def store_dir(base_dir: Path, job_name: str, store: str, partition: int) -> Path:
    """The live directory of ``store`` for the task owning ``partition``."""
    return Path(base_dir) / job_name / store / task_name(partition)


def checkpoint_dir(live: Path) -> Path:
    """The directory holding the last commit's checkpoint of the store at ``live``."""
    return live.with_name(live.name + CHECKPOINT_SUFFIX)


def job_dir(live: Path) -> Path:
    """``<base>/<job>``, the directory holding all of a job's stores, of the store at ``live``."""
    return live.parent.parent


def store_mode(live: Path) -> int:
    """The directory mode of the store at ``live``: that of its ``<base>/<job>/<store>``."""
    return permissions.mode_of(live.parent)


class StoreLock:
    """An exclusive lock on a store directory, held while a task has it open. Taking it
    creates the job's and the store's directories with ``mode`` (``job.state.permissions``),
    or gives existing ones that mode."""

    def __init__(self, live: Path, mode: int = permissions.DEFAULT_DIR_MODE) -> None:
        self.path = live.with_name(live.name + ".lock")
        self.mode = mode
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StoreLockedError` naming the holder."""
        permissions.ensure_dirs(self.path.parent, job_dir(self.path), self.mode)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     permissions.file_mode(self.mode))
        try:
            os.fchmod(fd, permissions.file_mode(self.mode))
        except BaseException:
            os.close(fd)
            raise
        fh = open(fd, "r+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise StoreLockedError(
                f"store directory {self.path.with_suffix('')} is in use by pid {holder}; "
                "two processes must not share a store base dir for the same task "
                "(give each its own job.logged.store.base.dir or stop the other one)"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def existing_checkpoint(live: Path) -> Path | None:
    """The checkpoint directory of the store at ``live``, read without changing anything:
    :func:`checkpoint_dir`, or its ``.old`` copy if a crash interrupted
    :func:`install_checkpoint` between its renames; None if there is neither."""
    return files.existing_dir(checkpoint_dir(live))


def replace_with_checkpoint(live: Path) -> bool:
    """Make ``live`` a private copy of its checkpoint; False if there is no checkpoint.

    SST files are immutable, so they are hard-linked; every other file (MANIFEST, WAL,
    OPTIONS, OFFSET) is copied so the live store cannot modify the checkpoint.
    """
    ckpt = checkpoint_dir(live)
    files.settle_dir(ckpt)  # a checkpoint install cut short: its previous checkpoint is back
    if not ckpt.is_dir():
        return False
    copy_checkpoint(ckpt, live)
    return True


def copy_checkpoint(checkpoint: Path, dest: Path) -> None:
    """Make the new directory ``dest`` (wiped first) a private copy of ``checkpoint``: SST
    files (immutable) hard-linked, the rest copied; with the modes of the store's directory."""
    wipe(dest)
    mode = store_mode(dest)
    permissions.make_dir(dest, mode)
    for entry in checkpoint.iterdir():
        if entry.suffix == ".sst":
            os.link(entry, dest / entry.name)
        else:
            shutil.copy2(entry, dest / entry.name)
    permissions.apply(dest, mode)


def wipe(path: Path) -> None:
    """Delete a store (or checkpoint) directory if it exists."""
    if path.exists():
        shutil.rmtree(path)


def wipe_checkpoint(live: Path) -> None:
    """Delete the checkpoint of the store at ``live``, with any copy an interrupted
    :func:`install_checkpoint` left (which would otherwise be put back)."""
    files.remove_dir(checkpoint_dir(live))


def install_checkpoint(tmp: Path, live: Path) -> None:
    """Make the freshly written ``tmp`` the checkpoint of ``live`` (given the store's modes
    first: RocksDB created it with the umask's), so a crash at any point leaves the previous
    checkpoint or this one (:func:`millpond.files.replace_dir`; readers go through
    :func:`existing_checkpoint` or :func:`replace_with_checkpoint`, which find the previous
    one where a crash left it)."""
    permissions.apply(tmp, store_mode(live))
    files.replace_dir(tmp, checkpoint_dir(live))

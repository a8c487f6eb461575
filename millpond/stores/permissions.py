"""Who may read a job's local state: the modes of everything millpond writes on disk.

``job.state.permissions`` (default ``0750``) is the mode of every directory millpond writes
under ``<job.logged.store.base.dir>/<job>`` (and in a ``file://`` backup location); files get
the same mode without execute bits (``0640``), so other users get nothing. The job directory
alone already keeps them out (they cannot search it); every entry below has the mode too, so
copying a directory elsewhere does not widen it.

Directories and files millpond creates get exactly the mode. RocksDB creates its own files
with the umask's mode (usually 0644); :func:`apply` sets them when a store opens, at each
commit and when it closes. Helpers that write beside a store take the mode of the store's
directory (``<base>/<job>/<store>``), which :func:`ensure_dirs` sets when the store is locked.
A job directory found with another mode (state from an older millpond, or the key changed) has
everything under it set once, with one log line.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from millpond.config.job import DEFAULT_STATE_PERMISSIONS
from millpond.stores.errors import StatePermissionsError

log = logging.getLogger(__name__)

DEFAULT_DIR_MODE = DEFAULT_STATE_PERMISSIONS  # 0o750


def file_mode(dir_mode: int) -> int:
    """The mode of files in directories of ``dir_mode``: the same bits without execute."""
    return dir_mode & 0o666


def mode_of(path: Path) -> int:
    """The permission bits of ``path`` (of its target if it is a symlink: a store directory
    may be a link to another disk)."""
    return stat.S_IMODE(os.stat(path).st_mode)


def _chmod(path: Path | str, mode: int, current: int) -> bool:
    """Set ``mode`` if it differs from ``current``; True if changed. A file removed meanwhile
    (RocksDB deletes obsolete files at any time) is no error."""
    if current == mode:
        return False
    try:
        os.chmod(path, mode)
    except FileNotFoundError:
        return False
    return True


def apply(directory: Path, mode: int, *, recursive: bool = False) -> int:
    """Give ``directory`` ``mode`` and each entry in it ``mode`` (directories) or
    :func:`file_mode` (files); symlinks in it are left alone (``directory`` itself may be
    one). Returns how many entries changed. A missing ``directory`` is nothing to do."""
    try:
        changed = int(_chmod(directory, mode, mode_of(directory)))
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    fmode = file_mode(mode)
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if recursive:
                changed += apply(Path(entry.path), mode, recursive=True)
            else:
                changed += _chmod(entry.path, mode, stat.S_IMODE(st.st_mode))
        elif stat.S_ISREG(st.st_mode):
            changed += _chmod(entry.path, fmode, stat.S_IMODE(st.st_mode))
    return changed


def make_dir(path: Path, mode: int) -> None:
    """Create ``path`` (its parent exists) with exactly ``mode``, whatever the umask; an
    existing directory is given ``mode``."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not path.is_dir():
            raise
    _chmod(path, mode, mode_of(path))


def ensure_dirs(path: Path, root: Path, mode: int) -> None:
    """Make ``path`` (``root`` or a directory below it) exist with ``mode``.

    Missing directories are created with ``mode``, also above ``root`` (existing ones there
    are someone else's and left alone). ``root`` and the directories from it down to ``path``
    are given ``mode``; a ``root`` that had another mode has everything under it set, once,
    with one log line."""
    path, root = Path(path), Path(root)
    chain = [path, *path.parents]
    if root not in chain:
        raise ValueError(f"{path} is not under {root}")
    missing: list[Path] = []
    for d in chain:
        if d.is_dir():
            break
        missing.insert(0, d)
    for d in missing:
        make_dir(d, mode)
    if root in missing:
        return
    try:
        before = mode_of(root)
        if before != mode:
            changed = apply(root, mode, recursive=True)
            log.info("%s had mode %04o: set it and the %d entries under it that differed to "
                     "%04o (directories) and %04o (files), as job.state.permissions says",
                     root, before, changed - 1, mode, file_mode(mode))
        for d in chain[: chain.index(root)]:
            if d not in missing:
                _chmod(d, mode, mode_of(d))
    except PermissionError as exc:
        raise StatePermissionsError(
            f"cannot give {exc.filename or root} mode {mode:04o} (job.state.permissions): "
            f"{exc.strerror}; is it another user's?") from exc


def create_file(path: Path | str, mode: int) -> int:
    """Open ``path`` for writing, created or truncated, with exactly ``mode`` (a file
    descriptor, to be closed by the caller)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd

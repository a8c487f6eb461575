"""Durable local files: atomic replace of a file or a directory, and file digests.

Every state file millpond writes beside a store (``OFFSET``, ``SIDE_INPUTS``), a Spark
snapshot's ``CURRENT`` and the files the Spark helpers cache go through
:func:`write_atomically`: a temp file in the same directory, written and fsynced, renamed
over the target with :func:`os.replace`, then the directory fsynced so the rename itself
survives a power loss. A reader sees the old content or the new, never a torn file.

A directory cannot be renamed over a non-empty one, so replacing one takes two renames;
:func:`replace_dir` keeps the previous directory as ``<target>.old`` between them and
:func:`settle_dir` (called before any read or the next replace) puts it back if a crash
came between the two, so the target is always the old directory or the new one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import BinaryIO

OLD_SUFFIX = ".old"
_DEFAULT_FILE_MODE = 0o644


def fsync_dir(path: Path | str) -> None:
    """Make the entries of directory ``path`` (creations, renames, removals) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path | str, data: str | bytes, mode: int | None = None,
                     *, encoding: str = "utf-8") -> None:
    """Replace ``path`` with ``data`` (text in ``encoding``, or bytes): a temp file beside it,
    fsynced, renamed over it, the directory fsynced. The file gets exactly ``mode`` when given
    (else 0644 less the umask, as :func:`open` would)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    payload = data.encode(encoding) if isinstance(data, str) else data
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                 _DEFAULT_FILE_MODE if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # exactly ``mode``, whatever the umask
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        remove_file(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        remove_file(tmp)
        raise
    fsync_dir(path.parent)


def old_dir(target: Path) -> Path:
    """Where :func:`replace_dir` keeps ``target``'s previous content while it swaps."""
    return target.with_name(target.name + OLD_SUFFIX)


def settle_dir(target: Path) -> None:
    """Finish or undo an interrupted :func:`replace_dir` of ``target``: if ``target`` is
    missing and its ``.old`` copy is there, the crash came between the two renames and the
    old copy is put back; an ``.old`` beside an existing ``target`` is left-over and removed."""
    old = old_dir(target)
    if not os.path.lexists(old):
        return
    if not target.exists():
        os.replace(old, target)
        fsync_dir(target.parent)
    else:
        remove_tree(old)


def existing_dir(target: Path) -> Path | None:
    """``target`` if it is a directory, else its ``.old`` copy if a :func:`replace_dir` was
    interrupted between its renames (without changing anything), else None."""
    if target.is_dir():
        return target
    old = old_dir(target)
    return old if old.is_dir() else None


def replace_dir(tmp: Path, target: Path) -> None:
    """Make the complete directory ``tmp`` (its files already written) ``target``, replacing
    any previous ``target``, so a crash at any point leaves the old directory or the new one.

    The files in ``tmp`` and ``tmp`` itself are fsynced first; the previous ``target`` moves
    to ``target.old``, ``tmp`` to ``target``, the parent is fsynced and ``.old`` removed. A
    crash between the two renames leaves ``.old`` alone, which :func:`settle_dir` (run first
    here, and by readers) renames back."""
    for entry in tmp.iterdir():
        if entry.is_file() and not entry.is_symlink():
            _fsync_file(entry)
    fsync_dir(tmp)
    settle_dir(target)
    old = old_dir(target)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    fsync_dir(target.parent)
    remove_tree(old)


def remove_tree(path: Path) -> None:
    """Delete a directory tree (or a file) if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        remove_file(path)


def remove_dir(target: Path) -> None:
    """Delete ``target`` and any ``.old`` copy of it: the copy first, so a crash between the
    two cannot leave the copy to be put back in place of a directory meant to be gone."""
    remove_tree(old_dir(target))
    remove_tree(target)


def file_digest(path: Path | str, algorithm: str = "sha256") -> str:
    """The hex digest of a local file (:func:`hashlib.file_digest`)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, algorithm).hexdigest()


def stream_digest(fh: BinaryIO, algorithm: str = "sha256") -> tuple[str, int]:
    """The hex digest and the size in bytes of what a binary file object holds from its
    current position (any object with ``read``, e.g. a remote file of fsspec)."""
    counter = _Counting(fh)
    digest = hashlib.file_digest(counter, algorithm)
    return digest.hexdigest(), counter.size


class _Counting:
    """A file object counting what is read through it (for :func:`stream_digest`)."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf: bytearray | memoryview) -> int:
        chunk = self._fh.read(len(buf))
        n = len(chunk)
        buf[:n] = chunk
        self.size += n
        return n


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_file(path: Path | str) -> None:
    """Delete the file ``path`` if it exists."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass




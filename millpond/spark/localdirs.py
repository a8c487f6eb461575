"""Local RocksDB store directories: write rebuilt ones a task adopts, read existing ones.

A rebuilt directory is written beside the live one (``partition-N.rebuild``), gets an
``OFFSET`` file naming the last changelog offset it reflects, and then replaces the live
directory, all while holding the task's store lock, so a running task is never clobbered.
At start-up a task adopts a directory whose OFFSET matches its changelog and replays only
the records after that offset.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from millpond.changelog import local
from millpond.changelog.checkpoint import StoreOffset, read_offset_file, write_offset_file
from millpond.changelog.errors import ChangelogError
from millpond.spark.errors import StateDirError
from millpond.stores import RocksDbEngine, RocksDbOptions, permissions

REBUILD_SUFFIX = ".rebuild"
TTL_SUFFIX_BYTES = 4  # RocksDB's TTL mode appends a 4-byte write time to every value
BATCH = 10_000


def partition_dirs(base: Path, job: str, store: str, partitions: Iterable[int]) -> dict[int, Path]:
    """The live directory of each partition's store under ``base``."""
    return {p: local.store_dir(Path(base), job, store, p) for p in partitions}


@dataclass
class DirWriter:
    """Writes one rebuilt store directory per partition, then installs them all."""

    store: str
    topic: str
    options: RocksDbOptions
    dirs: dict[int, Path]
    mode: int = permissions.DEFAULT_DIR_MODE  # job.state.permissions

    def __post_init__(self) -> None:
        self._locks: list[local.StoreLock] = []

    def lock(self) -> None:
        """Take every partition's store lock before anything is written: StateDirError
        (naming the holder's pid; none kept) if a task holds one."""
        try:
            for live in self.dirs.values():
                lock = local.StoreLock(live, self.mode)
                lock.acquire()
                self._locks.append(lock)
        except ChangelogError as exc:
            self.unlock()
            raise StateDirError(f"cannot write store {self.store!r}'s local directories, "
                                f"nothing changed: {exc}") from exc

    def unlock(self) -> None:
        for lock in self._locks:
            lock.release()
        self._locks.clear()

    def write(self, rows: Iterable[tuple[int, bytes, bytes]], last_offsets: dict[int, int]) -> dict[int, int]:
        """Write ``rows`` (partition, key, value), grouped by partition, into fresh
        directories; install them with OFFSET = ``last_offsets[p]``. Returns keys per partition."""
        counts = {p: 0 for p in self.dirs}
        engine: RocksDbEngine | None = None
        current: int | None = None
        batch: list[tuple[bytes, bytes | None]] = []
        done: set[int] = set()
        try:
            for partition, key, value in rows:
                if partition != current:
                    if engine is not None:
                        engine.write_batch(batch, disable_wal=True)
                        batch.clear()
                        engine.close()
                    if partition in done or partition not in self.dirs:
                        raise StateDirError(
                            f"rows of partition {partition} are not contiguous or not planned"
                        )
                    current = partition
                    done.add(partition)
                    engine = self._open(partition)
                assert engine is not None
                batch.append((bytes(key), bytes(value)))
                counts[partition] += 1
                if len(batch) >= BATCH:
                    engine.write_batch(batch, disable_wal=True)
                    batch.clear()
            if engine is not None:
                engine.write_batch(batch, disable_wal=True)
                engine.close()
                engine = None
            for partition in self.dirs:
                if partition not in done:
                    self._open(partition).close()  # an empty store is a valid store
            for partition, live in self.dirs.items():
                self._install(partition, live, last_offsets[partition])
        finally:
            if engine is not None:
                engine.close()
        return counts

    def _tmp(self, partition: int) -> Path:
        live = self.dirs[partition]
        return live.with_name(live.name + REBUILD_SUFFIX)

    def _open(self, partition: int) -> RocksDbEngine:
        tmp = self._tmp(partition)
        local.wipe(tmp)
        try:
            permissions.make_dir(tmp, local.store_mode(tmp))
            return RocksDbEngine(tmp, self.options)
        except Exception as exc:
            raise StateDirError(f"cannot create store directory {tmp}: {exc}") from exc

    def _install(self, partition: int, live: Path, offset: int) -> None:
        tmp = self._tmp(partition)
        permissions.apply(tmp, local.store_mode(tmp))
        write_offset_file(tmp, StoreOffset(self.store, self.topic, partition, offset))
        local.wipe(live)
        os.replace(tmp, live)


def read_offset(live: Path) -> int | None:
    """The changelog offset a store directory's OFFSET file names, or None if it has none."""
    try:
        found = read_offset_file(live)
    except ChangelogError as exc:
        raise StateDirError(str(exc)) from exc
    return found.offset if found is not None else None


def read_store_dir(live: str, ttl: bool) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of the RocksDB at ``live``, opened read-only (a running task may
    hold it). ``ttl``: strip the write time RocksDB's TTL mode appends to values."""
    from rocksdict import AccessType, Options, Rdict

    if not Path(live).is_dir():
        return
    try:
        db = Rdict(live, Options(raw_mode=True), access_type=AccessType.read_only())
    except Exception as exc:
        raise StateDirError(f"cannot open store directory {live} read-only: {exc}") from exc
    try:
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            value: bytes = it.value()
            yield it.key(), (value[:-TTL_SUFFIX_BYTES] if ttl else value)
            it.next()
        del it
    finally:
        db.close()

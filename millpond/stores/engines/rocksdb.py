"""RocksDbEngine: a BytesStore on rocksdict in raw-bytes mode.

Batches (put_all, delete_all, write_batch) go through one rocksdict WriteBatch. Keys and values
must be bytes (None included: the null-safe layer at the top of a store stack is where None is
rejected with a hint; here it is just a non-bytes value). Iterators are
rocksdict raw iterators (seek/valid/key/value/next) wrapped so they can be closed; the engine
closes any still open when it closes, because a live RocksDB iterator keeps the database (and its
LOCK file) open.
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

from rocksdict import Checkpoint, DbClosedError, Rdict, RdictIter, WriteBatch, WriteOptions

from millpond.stores.api import KeyValueIterator
from millpond.stores.engines.rocksdb_options import RocksDbOptions
from millpond.stores.errors import StoreClosedError, StoreError

__all__ = ["RocksDbEngine", "RocksDbOptions"]

STATS_PROPERTIES = ("estimate-num-keys", "live-sst-files-size", "cur-size-all-mem-tables")


class RocksDbEngine:
    """One RocksDB database in directory ``path`` (created if missing)."""

    def __init__(self, path: Path | str, options: RocksDbOptions | None = None) -> None:
        self.path = Path(path)
        self.options = options if options is not None else RocksDbOptions()
        self._closed = False
        self._iterators: weakref.WeakSet[_RocksIterator] = weakref.WeakSet()
        self._snapshots: weakref.WeakSet[RocksSnapshot] = weakref.WeakSet()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            opts = self.options.to_rocksdict()
            # The default column family's options named as well: rocksdict reopens an
            # existing database's column families with default table options otherwise (an
            # 8 MB block cache of its own, no bloom filter, memtables outside the shared
            # write-buffer manager), so a restarted store left the memory budget.
            self._db = Rdict(
                str(self.path),
                opts,
                column_families={"default": opts},
                access_type=self.options.access_type(),
            )
        except Exception as exc:
            raise StoreError(f"cannot open RocksDB store at {self.path}: {exc}") from exc
        self._db_get = self._db.get
        self._db_put = self._db.put
        self._db_delete = self._db.delete
        self._db_write = self._db.write
        self._wal_on = WriteOptions()
        self._wal_off = WriteOptions()
        # The stub declares disable_wal as a method; at runtime it is a settable property.
        setattr(self._wal_off, "disable_wal", True)  # noqa: B010

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"RocksDbEngine({str(self.path)!r}, {state})"

    # -- point operations -------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        """Value under ``key`` or None."""
        try:
            return self._db_get(key)
        except Exception as exc:
            raise self._error("get", exc, key) from exc

    def get_all(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """Present keys and their values, fetched with one multi-get."""
        key_list: list[Any] = list(keys)
        try:
            values = cast(list[bytes | None], self._db_get(key_list))
        except Exception as exc:
            raise self._error("get_all", exc, *key_list) from exc
        return {k: v for k, v in zip(key_list, values, strict=True) if v is not None}

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``."""
        try:
            self._db_put(key, value)
        except Exception as exc:
            raise self._error("put", exc, key, value) from exc

    def delete(self, key: bytes) -> None:
        """Remove ``key`` if present."""
        try:
            self._db_delete(key)
        except Exception as exc:
            raise self._error("delete", exc, key) from exc

    # -- batches ------------------------------------------------------------------------------

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Store every pair atomically in one WriteBatch."""
        batch = WriteBatch(raw_mode=True)
        put = batch.put
        pairs = list(items)
        try:
            for key, value in pairs:
                if type(value) is not bytes:  # a None value would otherwise be a delete
                    raise TypeError(value)
                put(key, value)
        except Exception as exc:
            raise self._bad_batch("put_all", exc, pairs, deletes=False) from exc
        self._apply("put_all", batch, disable_wal=False)

    def delete_all(self, keys: Iterable[bytes]) -> None:
        """Remove every key atomically in one WriteBatch."""
        self._write("delete_all", [(k, None) for k in keys], disable_wal=False)

    def write_batch(
        self, items: Sequence[tuple[bytes, bytes | None]], disable_wal: bool = False
    ) -> None:
        """Apply puts and deletes (value None) atomically in one WriteBatch.

        ``disable_wal`` skips RocksDB's write-ahead log (fast changelog restore): such writes
        are durable only after flush(), which the restorer must call before committing.
        """
        self._write("write_batch", items, disable_wal=disable_wal)

    def _write(
        self, op: str, items: Sequence[tuple[bytes, bytes | None]], disable_wal: bool
    ) -> None:
        batch = WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        try:
            for key, value in items:
                if value is None:
                    delete(key)
                else:
                    put(key, value)
        except Exception as exc:
            raise self._bad_batch(op, exc, items) from exc
        self._apply(op, batch, disable_wal)

    def _apply(self, op: str, batch: WriteBatch, disable_wal: bool) -> None:
        if len(batch):
            try:
                self._db_write(batch, self._wal_off if disable_wal else self._wal_on)
            except Exception as exc:
                raise self._error(op, exc) from exc

    # -- iteration ----------------------------------------------------------------------------

    def range(self, start: bytes, end: bytes) -> KeyValueIterator[bytes, bytes]:
        """Entries with start <= key < end, in key order."""
        self._check_bound("range", start)
        self._check_bound("range", end)
        return self._iterator("range", start, end, None)

    def prefix(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        """Entries whose key starts with ``prefix``: seek to it, stop at the first that does not."""
        self._check_bound("prefix", prefix)
        return self._iterator("prefix", prefix, None, prefix or None)

    def all(self) -> KeyValueIterator[bytes, bytes]:
        """Every entry in key order."""
        return self._iterator("all", None, None, None)

    def _iterator(
        self, op: str, start: bytes | None, end: bytes | None, prefix: bytes | None
    ) -> _RocksIterator:
        try:
            raw = self._db.iter()
            if start is None:
                raw.seek_to_first()
            else:
                raw.seek(start)
        except Exception as exc:
            raise self._error(op, exc) from exc
        iterator = _RocksIterator(raw, end, prefix, self.path)
        self._iterators.add(iterator)
        return iterator

    def _check_bound(self, op: str, bound: object) -> None:
        if type(bound) is not bytes:
            raise StoreError(
                f"RocksDB store at {self.path}: {op}: keys must be bytes, "
                f"got {type(bound).__name__}"
            )

    def snapshot(self) -> RocksSnapshot:
        """A consistent view of the database as it is now, for point reads, until
        :meth:`RocksSnapshot.release` (or :meth:`close`, which releases it)."""
        try:
            snap = RocksSnapshot(self._db.snapshot(), self.path)
        except Exception as exc:
            raise self._error("snapshot", exc) from exc
        self._snapshots.add(snap)
        return snap

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Flush memtables to SST files (makes WAL-less writes durable)."""
        try:
            self._db.flush(True)
        except Exception as exc:
            raise self._error("flush", exc) from exc

    def compact(self) -> None:
        """Compact the whole key range (also drops TTL-expired entries)."""
        try:
            self._db.compact_range(None, None)
        except Exception as exc:
            raise self._error("compact", exc) from exc

    def checkpoint(self, path: Path | str) -> None:
        """Write a consistent copy of the database to ``path`` (which must not exist yet).

        RocksDB hard-links the immutable SST files, so this is cheap on the same filesystem.
        The changelog layer takes one at each commit so a crash never leaves recovery to a
        directory holding uncommitted writes.
        """
        try:
            Checkpoint(self._db).create_checkpoint(str(path))
        except Exception as exc:
            raise self._error(f"checkpoint to {path}", exc) from exc

    def close(self) -> None:
        """Close open iterators, flush and close the database; idempotent."""
        if self._closed:
            return
        for iterator in list(self._iterators):
            iterator.close()
        self._iterators.clear()
        for snap in list(self._snapshots):  # a live snapshot keeps the database open
            snap.release()
        self._snapshots.clear()
        try:
            self._db.flush(True)
        finally:
            self._closed = True
            self._db.close()

    def destroy(self) -> None:
        """Close the database and delete its directory."""
        self.close()
        try:
            Rdict.destroy(str(self.path), self.options.to_rocksdict())
        except Exception as exc:
            raise StoreError(f"cannot destroy RocksDB store at {self.path}: {exc}") from exc
        shutil.rmtree(self.path, ignore_errors=True)

    def stats(self) -> dict[str, int]:
        """RocksDB's estimate-num-keys, live-sst-files-size and cur-size-all-mem-tables
        properties (keys with ``_``), for metrics; empty once closed."""
        if self._closed:
            return {}
        out: dict[str, int] = {}
        for prop in STATS_PROPERTIES:
            try:
                value = self._db.property_int_value(f"rocksdb.{prop}")
            except Exception:  # noqa: BLE001 - closed meanwhile: report what was read
                break
            if value is not None:
                out[prop.replace("-", "_")] = int(value)
        return out

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    def _bad_batch(
        self,
        op: str,
        exc: BaseException,
        items: Sequence[tuple[bytes, bytes | None]],
        deletes: bool = True,
    ) -> StoreError:
        """Name the first malformed item of a batch that failed to build (error path only).

        ``deletes``: whether a None value is a delete (write_batch) or invalid (put_all).
        """
        if not self._closed:
            for item in items:
                if not isinstance(item, tuple) or len(item) != 2:
                    return StoreError(
                        f"RocksDB store at {self.path}: {op}: items must be (key, value) pairs, "
                        f"got {type(item).__name__}"
                    )
                key, value = item
                invalid = self._invalid(op, key, b"" if value is None and deletes else value)
                if invalid is not None:
                    return invalid
        return self._error(op, exc)

    def _error(self, op: str, exc: BaseException, *args: object) -> StoreError:
        """Explain a rocksdict failure (only ever called on the error path)."""
        if self._closed or isinstance(exc, DbClosedError):
            return StoreClosedError(f"RocksDB store at {self.path}: {op}: store is closed")
        invalid = self._invalid(op, *args)
        return invalid or StoreError(f"RocksDB store at {self.path}: {op} failed: {exc}")

    def _invalid(self, op: str, *args: object) -> StoreError | None:
        """The error for a non-bytes key or value among ``args`` (None included), if any."""
        where = f"RocksDB store at {self.path}: {op}"
        for arg in args:
            if type(arg) is not bytes:
                return StoreError(
                    f"{where}: keys and values must be bytes, got {type(arg).__name__}"
                )
        return None


class _RocksIterator(KeyValueIterator[bytes, bytes]):
    """(key, value) pairs from a positioned raw iterator, up to ``end`` / while ``prefix`` holds."""

    __slots__ = ("_raw", "_end", "_prefix", "_closed", "_path", "__weakref__")

    def __init__(self, raw: RdictIter, end: bytes | None, prefix: bytes | None, path: Path) -> None:
        self._raw: RdictIter | None = raw
        self._end = end
        self._prefix = prefix
        self._closed = False
        self._path = path

    def __next__(self) -> tuple[bytes, bytes]:
        raw = self._raw
        if raw is None:
            if self._closed:
                raise StoreClosedError(
                    f"RocksDB store at {self._path}: iterator used after close()"
                )
            raise StopIteration
        if raw.valid():
            key: bytes = raw.key()
            end, prefix = self._end, self._prefix
            if (end is None or key < end) and (prefix is None or key.startswith(prefix)):
                value: bytes = raw.value()
                raw.next()
                return key, value
        else:
            try:
                raw.status()
            except Exception as exc:
                self._raw = None
                raise StoreError(f"RocksDB store at {self._path}: iteration failed: {exc}") from exc
        self._raw = None  # exhausted: release the RocksDB iterator right away
        raise StopIteration

    def close(self) -> None:
        """Release the RocksDB iterator; later next() calls raise StoreClosedError."""
        self._raw = None
        self._closed = True


class RocksSnapshot:
    """Point reads of the database as it was when the snapshot was taken.

    Point reads only: rocksdict's snapshot iterators (``Snapshot.iter``/``items``, 0.3.29)
    read the live database, as the read options they are built from drop the snapshot."""

    __slots__ = ("_snap", "_path", "__weakref__")

    def __init__(self, snap: Any, path: Path) -> None:
        self._snap: Any = snap
        self._path = path

    def get(self, key: bytes) -> bytes | None:
        """The value ``key`` had, or None."""
        if self._snap is None:
            raise StoreClosedError(f"RocksDB store at {self._path}: snapshot used after release")
        try:
            return cast(bytes, self._snap[key])
        except Exception as exc:
            if str(exc) == "key not found":  # rocksdict's only way to say so
                return None
            raise StoreError(f"RocksDB store at {self._path}: snapshot get: {exc}") from exc

    def release(self) -> None:
        """Let RocksDB drop the versions only this snapshot kept."""
        self._snap = None

"""InMemoryEngine: an ordered BytesStore held in a dict plus a sorted key list.

Point operations touch only the dict. The sorted key list is brought up to date lazily, when a
scan needs it: keys added since the last scan are merged in (a cheap timsort of two runs) and
deleted ones filtered out, and bisect finds the scan bounds. Scans copy their (key, value) pairs
up front, so like a RocksDB iterator they see the store as it was when the scan began.
"""

from __future__ import annotations

import weakref
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from millpond.stores.api import KeyValueIterator
from millpond.stores.errors import StoreClosedError, StoreError


class InMemoryEngine:
    """Ordered in-memory store: contents are lost on close (restore comes from the changelog)."""

    path: Path | None = None  # no directory: present so restore code can treat engines alike

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []  # sorted; with _added, covers _data's keys plus _stale
        self._added: list[bytes] = []  # keys put since the last scan, not yet in _keys
        self._stale: set[bytes] = set()  # deleted keys still listed in _keys or _added
        self._closed = False
        self._iterators: weakref.WeakSet[_ListIterator] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"InMemoryEngine({len(self._data)} entries{', closed' if self._closed else ''})"

    def get(self, key: bytes) -> bytes | None:
        """Value under ``key`` or None."""
        if self._closed:
            raise self._closed_error("get")
        if type(key) is not bytes:
            raise _bad("get", key)
        return self._data.get(key)

    def get_all(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """Present keys and their values."""
        get = self.get
        found = {}
        for key in keys:
            value = get(key)
            if value is not None:
                found[key] = value
        return found

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``."""
        if self._closed:
            raise self._closed_error("put")
        if type(key) is not bytes or type(value) is not bytes:
            raise _bad("put", key, value)
        data = self._data
        if key not in data:
            if key in self._stale:
                self._stale.discard(key)
            else:
                self._added.append(key)
        data[key] = value

    def delete(self, key: bytes) -> None:
        """Remove ``key`` if present."""
        if self._closed:
            raise self._closed_error("delete")
        if type(key) is not bytes:
            raise _bad("delete", key)
        if self._data.pop(key, None) is not None:
            self._stale.add(key)

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Store every pair (validated first, so a bad pair changes nothing)."""
        pairs = list(items)
        for key, value in pairs:
            if type(key) is not bytes or type(value) is not bytes:
                raise _bad("put_all", key, value)
        for key, value in pairs:
            self.put(key, value)

    def delete_all(self, keys: Iterable[bytes]) -> None:
        """Remove every key."""
        key_list = list(keys)
        for key in key_list:
            if type(key) is not bytes:
                raise _bad("delete_all", key)
        for key in key_list:
            self.delete(key)

    def write_batch(
        self, items: Sequence[tuple[bytes, bytes | None]], disable_wal: bool = False
    ) -> None:
        """Apply puts and deletes (value None); ``disable_wal`` is accepted and ignored."""
        for item in items:
            if not isinstance(item, tuple) or len(item) != 2:
                raise StoreError(
                    "in-memory store: write_batch: items must be (key, value) pairs, "
                    f"got {type(item).__name__}"
                )
            key, value = item
            if type(key) is not bytes or (value is not None and type(value) is not bytes):
                raise _bad("write_batch", key, value if value is not None else b"")
        for key, value in items:
            if value is None:
                self.delete(key)
            else:
                self.put(key, value)

    def range(self, start: bytes, end: bytes) -> KeyValueIterator[bytes, bytes]:
        """Entries with start <= key < end, in key order."""
        if type(start) is not bytes or type(end) is not bytes:
            raise _bad("range", start, end)
        keys = self._sorted_keys("range")
        return self._scan(keys, bisect_left(keys, start), bisect_left(keys, end))

    def prefix(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        """Entries whose key starts with ``prefix``, in key order."""
        if type(prefix) is not bytes:
            raise _bad("prefix", prefix)
        keys = self._sorted_keys("prefix")
        lo = hi = bisect_left(keys, prefix)
        while hi < len(keys) and keys[hi].startswith(prefix):
            hi += 1
        return self._scan(keys, lo, hi)

    def all(self) -> KeyValueIterator[bytes, bytes]:
        """Every entry in key order."""
        keys = self._sorted_keys("all")
        return self._scan(keys, 0, len(keys))

    def flush(self) -> None:
        """Nothing to flush; fails only if closed."""
        if self._closed:
            raise self._closed_error("flush")

    def compact(self) -> None:
        """Nothing to compact (no TTL support in memory)."""

    def checkpoint(self, path: Path | str) -> None:
        """Always fails: an in-memory store has nothing on disk to checkpoint."""
        raise StoreError(f"in-memory store: cannot checkpoint to {path}: nothing on disk")

    def close(self) -> None:
        """Drop the contents, close open iterators and refuse further use; idempotent."""
        for iterator in list(self._iterators):
            iterator.close()
        self._closed = True
        self._data = {}
        self._keys, self._added, self._stale = [], [], set()

    def destroy(self) -> None:
        """Same as close(): there is nothing on disk."""
        self.close()

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._closed

    def _sorted_keys(self, op: str) -> list[bytes]:
        if self._closed:
            raise self._closed_error(op)
        if self._added:
            self._keys += self._added
            self._keys.sort()
            self._added = []
        if self._stale:
            stale = self._stale
            self._keys = [k for k in self._keys if k not in stale]
            self._stale = set()
        return self._keys

    def _scan(self, keys: list[bytes], lo: int, hi: int) -> _ListIterator:
        chunk = keys[lo:hi]
        iterator = _ListIterator(list(zip(chunk, map(self._data.__getitem__, chunk), strict=True)))
        self._iterators.add(iterator)
        return iterator

    def _closed_error(self, op: str) -> StoreClosedError:
        return StoreClosedError(f"in-memory store: {op}: store is closed")


def _bad(op: str, *args: object) -> StoreError:
    """The error for the first non-bytes key or value (None included) among ``args``."""
    wrong = next(a for a in args if type(a) is not bytes)
    return StoreError(
        f"in-memory store: {op}: keys and values must be bytes, got {type(wrong).__name__}"
    )


class _ListIterator(KeyValueIterator[bytes, bytes]):
    """Iterator over a snapshot list of pairs."""

    __slots__ = ("_it", "_closed", "__weakref__")

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._it: Iterator[tuple[bytes, bytes]] | None = iter(pairs)
        self._closed = False

    def __next__(self) -> tuple[bytes, bytes]:
        it = self._it
        if it is None:
            if self._closed:
                raise StoreClosedError("in-memory store: iterator used after close()")
            raise StopIteration
        try:
            return next(it)
        except StopIteration:
            self._it = None
            raise

    def close(self) -> None:
        """Drop the snapshot; later next() calls raise StoreClosedError."""
        self._it = None
        self._closed = True

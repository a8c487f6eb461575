"""The store interfaces: typed KeyValueStore, bytes-level BytesStore and StorageEngine.

Two levels: the typed layers (null-safe, cached, serialized) implement ``KeyValueStore``; below
the serialized layer everything speaks bytes: the logged layer implements ``BytesStore`` and the
engines (RocksDB, in-memory) implement ``StorageEngine``, a BytesStore that can also skip the
write-ahead log, checkpoint itself and be destroyed. Ordering is always by the serialized key
bytes (unsigned lexicographic, like RocksDB's default comparator).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Generic, Protocol, TypeVar, runtime_checkable

K = TypeVar("K")
V = TypeVar("V")


class KeyValueIterator(Iterator[tuple[K, V]], Generic[K, V]):
    """Iterator of (key, value) tuples in key order, holding engine resources until closed.

    Use it as a context manager (``with store.range(a, b) as it: for k, v in it: ...``) or call
    close(): a RocksDB iterator pins memory and files, and the database cannot be reopened while
    one is alive. Exhausting the iterator releases resources too. After close(), next() raises
    StoreClosedError; after exhaustion it keeps raising StopIteration.
    """

    __slots__ = ()

    @abstractmethod
    def __next__(self) -> tuple[K, V]:
        """Return the next (key, value); StopIteration at the end."""

    @abstractmethod
    def close(self) -> None:
        """Release the underlying resources; idempotent."""

    def __iter__(self) -> KeyValueIterator[K, V]:
        return self

    def __enter__(self) -> KeyValueIterator[K, V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class KeyValueStore(ABC, Generic[K, V]):
    """The typed key-value store a task sees (Samza's KeyValueStore).

    Keys and values must not be None (NoneEntryError). Order for range/prefix/all is the order of
    the serialized key bytes. Methods raise StoreClosedError after close().

    With the object cache on (the default), ``get`` returns the very object that was ``put``
    (or deserialized on a miss), not a copy: mutating it changes what later gets return while
    it stays cached, but only a ``put`` marks it dirty, i.e. to be written to the engine and
    the changelog at the next commit. Scans return freshly deserialized objects.
    """

    @abstractmethod
    def get(self, key: K) -> V | None:
        """Value stored under ``key``, or None if absent."""

    @abstractmethod
    def get_all(self, keys: Iterable[K]) -> dict[K, V]:
        """Values of the given keys that are present (absent keys are left out of the dict)."""

    @abstractmethod
    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""

    def put_new(self, key: K, value: V) -> None:
        """put() under a key the caller knows holds no value (never put, or deleted): an
        object cache then skips the lookup below that a get would have made, and forgets
        the entry outright if it is deleted before being written down. Any other store
        takes it as a put."""
        self.put(key, value)

    @abstractmethod
    def put_all(self, items: Iterable[tuple[K, V]]) -> None:
        """put() each (key, value) pair, in order (a later pair for a key wins)."""

    @abstractmethod
    def delete(self, key: K) -> None:
        """Remove ``key``; no error if it is absent."""

    @abstractmethod
    def delete_all(self, keys: Iterable[K]) -> None:
        """delete() each key."""

    def write_batch(self, items: Sequence[tuple[K, V | None]]) -> None:
        """Apply puts and deletes (value None), in order; layers below apply them as one batch.

        This is how the cache writes its dirty entries down. The default applies each item
        with put()/delete(); the serialized layer overrides it with one engine batch.
        """
        put, delete = self.put, self.delete
        for key, value in items:
            if value is None:
                delete(key)
            else:
                put(key, value)

    @abstractmethod
    def range(self, start: K, end: K) -> KeyValueIterator[K, V]:
        """Entries with start <= serialized key < end, in key order (empty if start >= end)."""

    @abstractmethod
    def prefix(self, prefix: K) -> KeyValueIterator[K, V]:
        """Entries whose serialized key starts with the serialized ``prefix``, in key order."""

    @abstractmethod
    def all(self) -> KeyValueIterator[K, V]:
        """Every entry, in key order."""

    @abstractmethod
    def flush(self) -> None:
        """Push buffered writes down to the engine (and the engine's memtable to disk)."""

    @abstractmethod
    def close(self) -> None:
        """Flush, release resources and refuse further use; idempotent."""


class BytesStore(Protocol):
    """A key-value store over bytes: the logged layer and the engines implement it.

    Same semantics as KeyValueStore with bytes keys and values, plus write_batch(). Layers at
    this level do not check for None: the null-safe layer at the top of the stack does.
    """

    def get(self, key: bytes) -> bytes | None:
        """Value under ``key`` or None."""
        ...

    def get_all(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """Present keys and their values."""
        ...

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``."""
        ...

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Store every (key, value) pair (engines apply them atomically as one batch)."""
        ...

    def delete(self, key: bytes) -> None:
        """Remove ``key`` if present."""
        ...

    def delete_all(self, keys: Iterable[bytes]) -> None:
        """Remove every key."""
        ...

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Apply puts and deletes (value None) in one batch: how upper layers push writes down."""
        ...

    def range(self, start: bytes, end: bytes) -> KeyValueIterator[bytes, bytes]:
        """Entries with start <= key < end, in key order."""
        ...

    def prefix(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        """Entries whose key starts with ``prefix``, in key order."""
        ...

    def all(self) -> KeyValueIterator[bytes, bytes]:
        """Every entry in key order."""
        ...

    def flush(self) -> None:
        """Make buffered writes durable in the layer below."""
        ...

    def close(self) -> None:
        """Flush and release resources; idempotent."""
        ...


@runtime_checkable
class StorageEngine(BytesStore, Protocol):
    """The bottom of a store stack (Samza's StorageEngine): RocksDbEngine, InMemoryEngine.

    A BytesStore plus what the changelog and commit code need from the engine itself:
    WAL-less batches (changelogged stores and restores skip RocksDB's write-ahead log; such
    writes are durable only after flush()), checkpoints of its directory, and destruction.
    ``path`` is the engine's directory, None for an in-memory engine.
    """

    @property
    def path(self) -> Path | None:
        """The directory holding the engine's files (None in memory)."""
        ...

    def write_batch(
        self, items: Sequence[tuple[bytes, bytes | None]], disable_wal: bool = False
    ) -> None:
        """Apply puts and deletes (value None) atomically; ``disable_wal`` skips the WAL."""
        ...

    def flush(self) -> None:
        """Write memtables to disk: makes WAL-less writes durable."""
        ...

    def checkpoint(self, path: Path | str) -> None:
        """Write a consistent copy of the engine's files to ``path`` (which must not exist)."""
        ...

    def destroy(self) -> None:
        """Close the engine and delete its files."""
        ...

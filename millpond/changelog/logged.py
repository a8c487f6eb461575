"""The logged store layer: every write to the engine is mirrored to the changelog.

It sits between the serialized layer and the engine (Samza's ``LoggedStore``). Reads pass
straight through. Writes arrive as batches (the cache's write-down); each is applied to the
engine as one WriteBatch with RocksDB's write-ahead log OFF, and sent as one changelog record
per key. Skipping the WAL is safe because a crashed live directory is never trusted: the first
write after a commit calls ``on_dirty``, which removes the store's ``OFFSET`` file, and the
commit flushes the engine's memtables (``flush()``, then ``TaskStorage.after_commit``) before
it writes ``OFFSET`` again. Recovery of a directory without ``OFFSET`` starts from the last
commit's checkpoint or from nothing. Stores without a changelog have no logged layer and keep
the WAL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from millpond.kafka.producer import TrackedProducer
from millpond.stores.api import StorageEngine

TOUCHED_MAX = 200_000  # keys written between two commits that committed reads follow


class LoggedStore:
    """A BytesStore that writes through to ``inner`` (WAL off) and to ``topic[partition]``."""

    def __init__(
        self, inner: StorageEngine, producer: TrackedProducer, topic: str, partition: int,
        on_dirty: Callable[[], None] | None = None,
    ) -> None:
        self.inner = inner
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self._on_dirty = on_dirty
        self.dirty = False  # written since the last commit
        self.unflushed = False  # written since the engine's last flush (not yet durable)
        self.writes = 0  # changelog records sent (plain counters, read by metrics)
        self.bytes = 0  # their key + value bytes
        # keys written to the engine since the last commit, when committed reads are on
        # (millpond.query): they alone may differ from the commit's snapshot. Past
        # TOUCHED_MAX keys it stops (overflowed): committed reads wait for the next commit.
        self.touched: set[bytes] | None = None
        self.overflowed = False
        self._engine_write = inner.write_batch
        # Reads pass through unchanged.
        self.get = inner.get
        self.get_all = inner.get_all
        self.range = inner.range
        self.prefix = inner.prefix
        self.all = inner.all

    def __repr__(self) -> str:
        return f"LoggedStore({self.topic}[{self.partition}], over {self.inner!r})"

    def _mark(self) -> None:
        if not self.dirty:
            self.dirty = True
            if self._on_dirty is not None:
                self._on_dirty()

    def mark_clean(self) -> None:
        """Called after a commit: the engine's content is described by a checkpoint again."""
        self.dirty = False

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Apply a batch (None value = delete) to the engine without WAL, then log each key."""
        if not items:
            return
        self._mark()
        self.unflushed = True
        self._engine_write(items, True)  # disable_wal: see the module docstring
        if self.touched is not None:
            self.touched.update(key for key, _ in items)
            if len(self.touched) > TOUCHED_MAX:
                self.touched, self.overflowed = None, True
        send, topic, part = self.producer.send, self.topic, self.partition
        size = 0
        for key, value in items:
            send(topic, part, key, value)
            size += len(key) if value is None else len(key) + len(value)
        self.writes += len(items)
        self.bytes += size

    def put(self, key: bytes, value: bytes) -> None:
        """Write one key (a batch of one)."""
        self.write_batch([(key, value)])

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """Write every pair as one batch."""
        self.write_batch(list(items))

    def delete(self, key: bytes) -> None:
        """Delete one key (a tombstone in the changelog)."""
        self.write_batch([(key, None)])

    def delete_all(self, keys: Iterable[bytes]) -> None:
        """Delete every key as one batch."""
        self.write_batch([(k, None) for k in keys])

    def flush(self) -> None:
        """Flush the engine's memtables: the WAL-less writes so far become durable."""
        self.inner.flush()
        self.unflushed = False

    def sync(self) -> None:
        """flush() if anything was written since the last flush (before writing OFFSET)."""
        if self.unflushed:
            self.flush()

    def close(self) -> None:
        """Close the engine (which flushes its memtables)."""
        self.inner.close()

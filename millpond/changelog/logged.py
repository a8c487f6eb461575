"""The logged store layer: every write to the engine is mirrored to the changelog.

It sits between the cached layer and the engine (Samza's ``LoggedStore``). Reads pass
straight through. The first write after a commit calls ``on_dirty`` so the store's
``OFFSET`` file can be removed: from then on the directory holds writes that no
checkpoint describes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from millpond.changelog.producer import TrackedProducer


class LoggedStore:
    """A BytesStore that writes through to ``inner`` and to ``topic[partition]``."""

    def __init__(
        self, inner: Any, producer: TrackedProducer, topic: str, partition: int,
        on_dirty: Callable[[], None] | None = None,
    ) -> None:
        self.inner = inner
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self._on_dirty = on_dirty
        self.dirty = False
        self.writes = 0
        # Reads pass through unchanged.
        self.get = inner.get
        self.get_all = inner.get_all
        self.range = inner.range
        self.prefix = inner.prefix
        self.all = inner.all

    def _mark(self) -> None:
        if not self.dirty:
            self.dirty = True
            if self._on_dirty is not None:
                self._on_dirty()

    def mark_clean(self) -> None:
        """Called after a commit: the engine's content is described by a checkpoint again."""
        self.dirty = False

    def _log(self, items: Iterable[tuple[bytes, bytes | None]]) -> None:
        send, topic, part = self.producer.send, self.topic, self.partition
        n = 0
        for key, value in items:
            send(topic, part, key, value)
            n += 1
        self.writes += n

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Apply a batch (None value = delete) to the engine, then log it."""
        if not items:
            return
        self._mark()
        self.inner.write_batch(items)
        self._log(items)

    def put(self, key: bytes, value: bytes) -> None:
        self.write_batch([(key, value)])

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        self.write_batch(list(items))

    def delete(self, key: bytes) -> None:
        self.write_batch([(key, None)])

    def delete_all(self, keys: Iterable[bytes]) -> None:
        self.write_batch([(k, None) for k in keys])

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

"""Undoing one record's store writes when the record is skipped (dead-lettered).

The runtime turns a task's :class:`RecordJournal` on for the records it processes when its
dead-letter policy can skip a failed record (``task.dlq.stream`` set; without it a failure
stops the job, and nothing is journaled, at no cost). Every
``put``/``delete`` a record makes then notes the key's prior state in the journal, first
come first: the object cache notes the prior cached value only when the key was dirty (a
clean or uncached key is what the layer below holds), a store without a cache
(:class:`UndoLogStore`) reads the prior value below. When the record fails and the
dead-letter policy skips it, :meth:`RecordJournal.undo` puts every prior state back, newest
first; when it succeeds the journal is cleared.

A write-down inside a record (the cache's write.batch.size reached, an eviction, a scan)
sends the record's writes to the engine and the changelog before the record ends. The cache
then first reads the prior values of the record's clean keys from below, so the undo puts
those values back as dirty entries: the next write-down writes them to the engine and the
changelog again, and the store ends as if the record had never run.

A task that keeps state in memory beside its stores (a dataflow's stream time, its next
window end and earliest timer) puts it back after the undo: the run loop calls the task's
``undo_record()`` (``DataflowTask``: each operator reads them back from its store).

Not undone: an in-place mutation of a cached object without a ``put`` (the cache never
sees it), nor one of an object that an earlier record put and that is not written down yet
(the prior value is that same object). Put a new object instead of mutating a stored one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from millpond.stores.api import K, KeyValueIterator, KeyValueStore, V

_ABSENT = object()  # an UndoLogStore key that was not present before the record


class Undoable(Protocol):
    """A store layer that can put back one journaled key."""

    def undo_write(self, key: Any, prior: Any) -> None:
        """Put ``key`` back to ``prior`` (as noted when the record first wrote it)."""


class RecordJournal:
    """The store writes of the record being processed, across one task's stores.

    ``entries`` is None while journaling is off (outside records: init, window, timers
    outside process), else the list of ``(store, key, prior)`` the record's writes noted.
    """

    __slots__ = ("entries", "_stores")

    def __init__(self) -> None:
        self.entries: list[tuple[Undoable, Any, Any]] | None = None
        self._stores: list[Any] = []

    def attach(self, store: Any) -> None:
        """``store`` (a CachedStore or UndoLogStore) journals into this journal when on."""
        self._stores.append(store)

    def start(self) -> list[tuple[Undoable, Any, Any]]:
        """Turn journaling on for a run of records; returns the (empty) entry list, which
        the caller clears after each record that succeeded."""
        entries: list[tuple[Undoable, Any, Any]] = []
        self.entries = entries
        for store in self._stores:
            store._journal = entries
        return entries

    def stop(self) -> None:
        """Turn journaling off (the writes since the last clear stay as they are)."""
        self.entries = None
        for store in self._stores:
            store._journal = None

    def undo(self) -> int:
        """Undo the journaled writes, newest first, and clear them; returns how many."""
        entries = self.entries
        if not entries:
            return 0
        n = len(entries)
        for store, key, prior in reversed(entries):
            store.undo_write(key, prior)
        entries.clear()
        return n


class UndoLogStore(KeyValueStore[K, V]):
    """For a store without an object cache: notes each key's prior value (one read below
    per write while journaling) so a skipped record's writes can be put back."""

    def __init__(self, inner: KeyValueStore[K, V], store_name: str) -> None:
        self.inner = inner
        self.name = store_name
        self._journal: list[tuple[Undoable, Any, Any]] | None = None

    def __repr__(self) -> str:
        return f"UndoLogStore({self.name!r}, over {self.inner!r})"

    def _note(self, key: K) -> None:
        journal = self._journal
        if journal is not None:
            prior = self.inner.get(key)
            journal.append((self, key, _ABSENT if prior is None else prior))

    def undo_write(self, key: Any, prior: Any) -> None:
        """Write the prior value (or delete the key) through the layers below."""
        if prior is _ABSENT:
            self.inner.delete(key)
        else:
            self.inner.put(key, prior)

    def get(self, key: K) -> V | None:
        return self.inner.get(key)

    def get_all(self, keys: Iterable[K]) -> dict[K, V]:
        return self.inner.get_all(keys)

    def put(self, key: K, value: V) -> None:
        self._note(key)
        self.inner.put(key, value)

    def put_all(self, items: Iterable[tuple[K, V]]) -> None:
        pairs = list(items)
        for key, _ in pairs:
            self._note(key)
        self.inner.put_all(pairs)

    def delete(self, key: K) -> None:
        self._note(key)
        self.inner.delete(key)

    def delete_all(self, keys: Iterable[K]) -> None:
        key_list = list(keys)
        for key in key_list:
            self._note(key)
        self.inner.delete_all(key_list)

    def write_batch(self, items: Sequence[tuple[K, V | None]]) -> None:
        for key, _ in items:
            self._note(key)
        self.inner.write_batch(items)

    def range(self, start: K, end: K) -> KeyValueIterator[K, V]:
        return self.inner.range(start, end)

    def prefix(self, prefix: K) -> KeyValueIterator[K, V]:
        return self.inner.prefix(prefix)

    def all(self) -> KeyValueIterator[K, V]:
        return self.inner.all()

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

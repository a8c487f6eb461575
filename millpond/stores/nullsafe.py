"""NullSafeStore: the top layer of every store stack, the one place None is rejected.

Stores hold no None: a None value would be indistinguishable from an absent key, and in the
changelog a None value is a tombstone. Rather than every layer checking, this layer checks once
at the API boundary and raises NoneEntryError naming the store; the layers below trust it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from millpond.stores.api import K, KeyValueIterator, KeyValueStore, V
from millpond.stores.errors import NoneEntryError


class NullSafeStore(KeyValueStore[K, V]):
    """Rejects None keys and values (and None scan bounds), then delegates to ``inner``."""

    def __init__(self, inner: KeyValueStore[K, V], store_name: str) -> None:
        self.inner = inner
        self.name = store_name
        # Bound once: get/put are one identity test and one call.
        self._get = inner.get
        self._put = inner.put
        self._delete = inner.delete

    def __repr__(self) -> str:
        return f"NullSafeStore({self.name!r}, over {self.inner!r})"

    def get(self, key: K) -> V | None:
        """Value under ``key`` or None."""
        if key is None:
            raise self._none("get", "key")
        return self._get(key)

    def get_all(self, keys: Iterable[K]) -> dict[K, V]:
        """Present keys and their values."""
        key_list = list(keys)
        if any(key is None for key in key_list):
            raise self._none("get_all", "key")
        return self.inner.get_all(key_list)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``."""
        if key is None or value is None:
            raise self._none("put", "key" if key is None else "value")
        self._put(key, value)

    def put_new(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, which holds no value (see KeyValueStore.put_new)."""
        if key is None or value is None:
            raise self._none("put_new", "key" if key is None else "value")
        self.inner.put_new(key, value)

    def put_all(self, items: Iterable[tuple[K, V]]) -> None:
        """Store every pair; a None anywhere rejects the whole call before anything is written."""
        pairs = list(items)
        for key, value in pairs:
            if key is None or value is None:
                raise self._none("put_all", "key" if key is None else "value")
        self.inner.put_all(pairs)

    def delete(self, key: K) -> None:
        """Remove ``key`` if present."""
        if key is None:
            raise self._none("delete", "key")
        self._delete(key)

    def delete_all(self, keys: Iterable[K]) -> None:
        """Remove every key; a None key rejects the whole call."""
        key_list = list(keys)
        if any(key is None for key in key_list):
            raise self._none("delete_all", "key")
        self.inner.delete_all(key_list)

    def write_batch(self, items: Sequence[tuple[K, V | None]]) -> None:
        """Puts and deletes (value None); a None key rejects the whole batch."""
        for key, _ in items:
            if key is None:
                raise self._none("write_batch", "key")
        self.inner.write_batch(items)

    def range(self, start: K, end: K) -> KeyValueIterator[K, V]:
        """Entries with serialized start <= serialized key < serialized end, in key order."""
        if start is None or end is None:
            raise self._none("range", "start" if start is None else "end")
        return self.inner.range(start, end)

    def prefix(self, prefix: K) -> KeyValueIterator[K, V]:
        """Entries whose serialized key starts with the serialized ``prefix``."""
        if prefix is None:
            raise self._none("prefix", "prefix")
        return self.inner.prefix(prefix)

    def all(self) -> KeyValueIterator[K, V]:
        """Every entry, in key order."""
        return self.inner.all()

    def flush(self) -> None:
        """Flush the layers below."""
        self.inner.flush()

    def close(self) -> None:
        """Flush and close the layers below; idempotent."""
        self.inner.close()

    def _none(self, op: str, what: str) -> NoneEntryError:
        hint = " (use delete() to remove a key)" if what == "value" else ""
        return NoneEntryError(f"{op}: {what} must not be None{hint}", store=self.name)

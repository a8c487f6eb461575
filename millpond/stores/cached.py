"""CachedStore: an LRU write-back cache over a BytesStore (Samza's CachedStore).

The cache holds up to ``cache_size`` entries, clean or dirty; a delete is a dirty None and a
lookup that found nothing is a clean None, so neither reaches the inner store again. put/delete
only touch the cache. Dirty entries go down in ONE ``inner.write_batch`` call when their count
reaches ``write_batch_size``, when a dirty entry is about to be evicted, on flush(), and before a
scan (range/prefix/all then read the inner store directly). So repeated writes to a key between
flushes reach the inner store once. ``cache_size=0`` makes the layer a pure pass-through.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from millpond.stores.api import BytesStore, KeyValueIterator
from millpond.stores.errors import NoneEntryError, StoreClosedError, StoreConfigError, StoreError

_MISS = object()
_PASS_THROUGH = (
    "get", "get_all", "put", "put_all", "delete", "delete_all", "write_batch",
    "range", "prefix", "all", "flush", "close",
)  # fmt: skip


class CachedStore:
    """LRU write-back cache of ``cache_size`` entries over ``inner`` (a BytesStore itself)."""

    def __init__(self, inner: BytesStore, cache_size: int = 1000, write_batch_size: int = 500):
        if cache_size < 0:
            raise StoreConfigError(f"object.cache.size must be >= 0, got {cache_size}")
        if write_batch_size < 1:
            raise StoreConfigError(f"write.batch.size must be >= 1, got {write_batch_size}")
        self.inner = inner
        self.cache_size = cache_size
        self.write_batch_size = write_batch_size
        self._cache: OrderedDict[bytes, bytes | None] = OrderedDict()
        self._dirty: dict[bytes, None] = {}  # keys whose cached value is not yet written down
        self._closed = False
        self._cache_get = self._cache.get
        self._touch = self._cache.move_to_end
        self._inner_get = inner.get
        self._inner_write_batch = inner.write_batch
        if cache_size == 0:
            # Pass-through: instance attributes shadow the caching methods, so calls go
            # straight to the inner store at no extra cost.
            for name in _PASS_THROUGH:
                setattr(self, name, getattr(inner, name))

    def __repr__(self) -> str:
        return (
            f"CachedStore({len(self._cache)}/{self.cache_size} cached, "
            f"{len(self._dirty)} dirty, over {self.inner!r})"
        )

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        """Cached value (a cached delete/miss is None without a lookup below), else inner's."""
        value = self._cache_get(key, _MISS)
        if value is _MISS:
            value = self._inner_get(key)  # raises for a closed store or a bad key
            cache = self._cache
            cache[key] = value
            if len(cache) > self.cache_size:
                old_key, old_value = cache.popitem(last=False)
                if old_key in self._dirty:
                    self._evict_dirty(old_key, old_value)
            return value
        self._touch(key)
        return value  # type: ignore[return-value]

    def get_all(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        """Present keys and values; cache misses are fetched with one inner get_all."""
        cache_get, touch = self._cache_get, self._touch
        found: dict[bytes, bytes] = {}
        missing: list[bytes] = []
        for key in keys:
            value = cache_get(key, _MISS)
            if value is _MISS:
                missing.append(key)
            else:
                touch(key)
                if value is not None:
                    found[key] = value  # type: ignore[assignment]
        if missing:
            below = self.inner.get_all(missing)
            cache = self._cache
            for key in missing:
                value = below.get(key)
                cache[key] = value
                if value is not None:
                    found[key] = value
            if len(cache) > self.cache_size:
                self._evict()
        return found

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes) -> None:
        """Cache ``value`` as dirty; it reaches the inner store at the next write-down."""
        if type(key) is not bytes or type(value) is not bytes or self._closed:
            raise self._rejected("put", key, value)
        self._set_dirty(key, value)

    def delete(self, key: bytes) -> None:
        """Cache a dirty None: get() sees the delete at once, the inner store at write-down."""
        if type(key) is not bytes or self._closed:
            raise self._rejected("delete", key)
        self._set_dirty(key, None)

    def _set_dirty(self, key: bytes, value: bytes | None) -> None:
        """Cache a dirty entry; write down a full batch, and a dirty entry evicted by LRU."""
        cache = self._cache
        cache[key] = value
        self._touch(key)
        dirty = self._dirty
        dirty[key] = None
        if len(dirty) >= self.write_batch_size:
            self._write_dirty()
        if len(cache) > self.cache_size:
            old_key, old_value = cache.popitem(last=False)
            if old_key in dirty:
                self._evict_dirty(old_key, old_value)

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        """put() each pair."""
        put = self.put
        for key, value in items:
            put(key, value)

    def delete_all(self, keys: Iterable[bytes]) -> None:
        """delete() each key."""
        delete = self.delete
        for key in keys:
            delete(key)

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Apply puts and deletes (value None) to the cache, like put()/delete()."""
        put, delete = self.put, self.delete
        for key, value in items:
            if value is None:
                delete(key)
            else:
                put(key, value)

    # -- scans --------------------------------------------------------------------------------

    def range(self, start: bytes, end: bytes) -> KeyValueIterator[bytes, bytes]:
        """Write dirty entries down, then scan the inner store."""
        self._write_dirty()
        return self.inner.range(start, end)

    def prefix(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        """Write dirty entries down, then scan the inner store."""
        self._write_dirty()
        return self.inner.prefix(prefix)

    def all(self) -> KeyValueIterator[bytes, bytes]:
        """Write dirty entries down, then scan the inner store."""
        self._write_dirty()
        return self.inner.all()

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Write dirty entries down in one write_batch, then flush the inner store."""
        self._write_dirty()
        self.inner.flush()

    def close(self) -> None:
        """Flush, drop the cache and close the inner store; idempotent."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._cache.clear()
            self._dirty.clear()
            self.inner.close()

    @property
    def dirty_count(self) -> int:
        """Number of cached writes not yet written to the inner store."""
        return len(self._dirty)

    def _write_dirty(self) -> None:
        """Push every dirty entry to the inner store in one write_batch; they become clean."""
        dirty = self._dirty
        if not dirty:
            if self._closed:
                raise StoreClosedError("cached store is closed")
            return
        cache = self._cache
        self._inner_write_batch([(key, cache[key]) for key in dirty])
        dirty.clear()

    def _evict(self) -> None:
        """Drop least recently used entries beyond cache_size, writing dirty ones down first."""
        cache, dirty = self._cache, self._dirty
        while len(cache) > self.cache_size:
            key, value = cache.popitem(last=False)
            if key in dirty:
                self._evict_dirty(key, value)

    def _evict_dirty(self, key: bytes, value: bytes | None) -> None:
        """``key`` was just popped as LRU but is dirty: write all dirty entries down, then drop it."""
        cache = self._cache
        cache[key] = value  # keep it visible until it is safely written down
        cache.move_to_end(key, last=False)
        self._write_dirty()
        del cache[key]

    def _rejected(self, op: str, *args: object) -> StoreError:
        if self._closed:
            return StoreClosedError(f"cached store: {op}: store is closed")
        if any(a is None for a in args):
            hint = " (use delete() to remove a key)" if op == "put" and args[0] is not None else ""
            return NoneEntryError(f"cached store: {op}: keys and values must not be None{hint}")
        wrong = next(a for a in args if type(a) is not bytes)
        return StoreError(
            f"cached store: {op}: keys and values must be bytes, got {type(wrong).__name__}"
        )

"""CachedStore: an LRU write-back cache of deserialized objects (Samza's CachedStore).

It sits above the serialized layer, so a hit is one dict lookup: no serde, no engine call. It
holds clean entries, dirty entries (put or deleted since the last write-down) and misses (a
lookup that found nothing is cached as absent, so it does not reach the engine again).

Write-back: put/delete only mark the entry dirty. Dirty entries go down to the layer below in
``write_batch`` calls (each becomes one engine batch and one changelog record per key) at
``flush()`` (every commit calls it), before a scan (range/prefix/all then read the layer below),
when a dirty entry is about to be evicted, and when the number of dirty entries reaches
``write_batch_size``. So repeated writes to a key between commits cost one write-down.

Bounds (Samza's keys, plus one byte bound in the spirit of Kafka Streams'
``statestore.cache.max.bytes``): at most ``cache_size`` entries (object.cache.size; 0 = no
cache at all, the factory then leaves the layer out), at most ``write_batch_size`` dirty
entries (write.batch.size; 0 = write-through: every put is written down at once, the cache
still serves reads), and about ``max_bytes`` of memory (object.cache.max.bytes; 0 = no
cache). The byte figure is an ESTIMATE: a running average of ``sys.getsizeof`` of sampled
keys and values (one level into dicts, lists, tuples and sets) plus ~100 bytes of bookkeeping
per entry, times the number of entries. Shared sub-objects are counted once per entry and
objects nested deeper than one level are not counted.

Shared objects: the cache stores the object the task put and ``get`` returns that same object
(as in Samza and Faust). Mutating it in place changes what later gets return while it stays
cached; a put() of it marks it dirty, and whatever the object holds at the next write-down is
what is written. A mutation without a put is never written to the engine or the changelog: it
is lost when the entry is evicted or the process restarts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from sys import getsizeof
from typing import Any

from millpond.stores.api import K, KeyValueIterator, KeyValueStore, V
from millpond.stores.errors import StoreClosedError, StoreConfigError

MiB = 1024 * 1024
DEFAULT_OBJECT_CACHE_SIZE = 100_000
DEFAULT_WRITE_BATCH_SIZE = 50_000
DEFAULT_CACHE_MAX_BYTES = 32 * MiB

ENTRY_OVERHEAD = 100  # bytes per cached entry: OrderedDict slot and node (measured ~91)
WRITE_CHUNK = 1000  # entries per write_batch call below: bounds the serialized copies in flight
_FULL_SAMPLES = 1024  # sample every inserted entry's size until this many samples ...
_SAMPLE_EVERY = 16  # ... then one insert in this many
_DECAY_AT = 8192  # halve the sample sum and count here, so recent sizes weigh more
_MISS = object()
_CLEAN = object()  # journaled prior state: the layer below holds the key's value


def estimate_size(obj: object) -> int:
    """Rough memory of ``obj``: sys.getsizeof, plus its items for dicts, lists, tuples and sets.

    Containers are looked into one level deep, through at most 16 items (scaled up for larger
    ones). It is an estimate for the cache's byte bound, not an accounting.
    """
    size = getsizeof(obj)
    kind = type(obj)
    if kind is dict:
        n = len(obj)  # type: ignore[arg-type]
        if n:
            part = 0
            for k, v in islice(obj.items(), 16):  # type: ignore[attr-defined]
                part += getsizeof(k) + getsizeof(v)
            size += part * n // min(n, 16)
    elif kind is list or kind is tuple or kind is set or kind is frozenset:
        n = len(obj)  # type: ignore[arg-type]
        if n:
            part = 0
            for item in islice(obj, 16):  # type: ignore[call-overload]
                part += getsizeof(item)
            size += part * n // min(n, 16)
    return size


class CachedStore(KeyValueStore[K, V]):
    """LRU write-back object cache of store ``store_name`` over the typed store ``inner``."""

    def __init__(
        self,
        inner: KeyValueStore[K, V],
        store_name: str,
        cache_size: int = DEFAULT_OBJECT_CACHE_SIZE,
        write_batch_size: int = DEFAULT_WRITE_BATCH_SIZE,
        max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
    ) -> None:
        for key, value in (
            ("object.cache.size", cache_size),
            ("write.batch.size", write_batch_size),
            ("object.cache.max.bytes", max_bytes),
        ):
            if value < 0:
                raise StoreConfigError(f"{key} must be >= 0, got {value}", store=store_name)
        if cache_size == 0 or max_bytes == 0:
            raise StoreConfigError(
                "a cache layer needs object.cache.size > 0 and object.cache.max.bytes > 0 "
                "(0 turns the cache off: build the stack without this layer)",
                store=store_name,
            )
        self.inner = inner
        self.name = store_name
        self.cache_size = cache_size
        self.write_batch_size = write_batch_size
        self.max_bytes = max_bytes
        self._cache: OrderedDict[K, V | None] = OrderedDict()  # None = known absent
        self._dirty: dict[K, None] = {}  # keys whose cached value is not written down yet
        self._batch = max(1, write_batch_size)  # 0 = write-through: a write-down per write
        self._capacity = cache_size  # entries allowed now: min(cache_size, bytes bound)
        self._size_sum = 0  # sampled entry sizes (bytes) ...
        self._size_n = 0  # ... and how many were sampled
        self._sample_countdown = 1
        self._closed = False
        # Plain int counters (one add each; a metrics reporter reads them at scrape time).
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self._writing: Sequence[tuple[K, V | None]] = ()  # the chunk being written down
        self._refused: list[K] = []  # keys of that chunk the layers below did not store
        # (store, key, prior) of the record being processed, while the runtime journals
        # (millpond.stores.undo); None otherwise
        self._journal: list[tuple[Any, Any, Any]] | None = None
        # Bound once: the hit paths are a dict lookup and a move, no attribute chains.
        self._cache_get = self._cache.get
        self._touch = self._cache.move_to_end
        self._inner_get = inner.get
        self._inner_write_batch: Callable[[Sequence[tuple[K, V | None]]], None] = (
            inner.write_batch
        )

    def __repr__(self) -> str:
        return (
            f"CachedStore({self.name!r}, {len(self._cache)}/{self._capacity} cached, "
            f"{len(self._dirty)} dirty, over {self.inner!r})"
        )

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: K) -> V | None:
        """The cached object (a cached delete or miss is None, with no lookup below), else
        the inner store's value, which is then cached."""
        value = self._cache_get(key, _MISS)
        if value is _MISS:
            self.misses += 1
            value = self._inner_get(key)
            self._cache[key] = value
            self._inserted(key, value)
            return value
        self.hits += 1
        self._touch(key)
        return value  # type: ignore[return-value]

    def get_all(self, keys: Iterable[K]) -> dict[K, V]:
        """Present keys and values; cache misses are fetched with one inner get_all."""
        cache_get, touch = self._cache_get, self._touch
        found: dict[K, V] = {}
        missing: list[K] = []
        hits = 0
        for key in keys:
            value = cache_get(key, _MISS)
            if value is _MISS:
                missing.append(key)
            else:
                hits += 1
                touch(key)
                if value is not None:
                    found[key] = value  # type: ignore[assignment]
        self.hits += hits
        if missing:
            self.misses += len(missing)
            below = self.inner.get_all(missing)
            cache = self._cache
            for key in missing:
                got = below.get(key)
                cache[key] = got
                self._sample(key, got)
                if got is not None:
                    found[key] = got
            if len(cache) > self._capacity:
                self._evict()
        return found

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: K, value: V) -> None:
        """Cache ``value`` (this very object) as dirty; it is written down later."""
        if self._closed:
            raise self._closed_error("put")
        cache, dirty = self._cache, self._dirty
        journal = self._journal
        if journal is not None:  # a record being processed: note what to put back on a skip
            journal.append((self, key, cache[key] if key in dirty else _CLEAN))
        new = key not in cache
        cache[key] = value
        if not new:
            self._touch(key)
        if key not in dirty:
            dirty[key] = None
            if len(dirty) >= self._batch:
                self._write_dirty()
        if new:
            self._inserted(key, value)

    def delete(self, key: K) -> None:
        """Cache a dirty absence: get() sees the delete at once, the layer below at write-down."""
        if self._closed:
            raise self._closed_error("delete")
        cache, dirty = self._cache, self._dirty
        journal = self._journal
        if journal is not None:
            journal.append((self, key, cache[key] if key in dirty else _CLEAN))
        new = key not in cache
        cache[key] = None
        if not new:
            self._touch(key)
        if key not in dirty:
            dirty[key] = None
            if len(dirty) >= self._batch:
                self._write_dirty()
        if new:
            self._inserted(key, None)

    def put_all(self, items: Iterable[tuple[K, V]]) -> None:
        """put() each pair."""
        put = self.put
        for key, value in items:
            put(key, value)

    def delete_all(self, keys: Iterable[K]) -> None:
        """delete() each key."""
        delete = self.delete
        for key in keys:
            delete(key)

    # -- scans --------------------------------------------------------------------------------

    def range(self, start: K, end: K) -> KeyValueIterator[K, V]:
        """Write dirty entries down, then scan the layer below (fresh objects, not cached ones)."""
        self._write_dirty()
        return self.inner.range(start, end)

    def prefix(self, prefix: K) -> KeyValueIterator[K, V]:
        """Write dirty entries down, then scan the layer below."""
        self._write_dirty()
        return self.inner.prefix(prefix)

    def all(self) -> KeyValueIterator[K, V]:
        """Write dirty entries down, then scan the layer below."""
        self._write_dirty()
        return self.inner.all()

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Write every dirty entry down, then flush the layers below (the commit calls this)."""
        if self._closed:
            raise self._closed_error("flush")
        self._write_dirty()
        self.inner.flush()

    def close(self) -> None:
        """Flush, drop the cache and close the layers below; idempotent."""
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
        """Number of cached writes not yet written to the layer below."""
        return len(self._dirty)

    @property
    def cached_count(self) -> int:
        """Number of cached entries (values, deletes and misses)."""
        return len(self._cache)

    @property
    def capacity(self) -> int:
        """Entries the cache holds at most right now: object.cache.size, or fewer if the
        estimated entry size times that would exceed object.cache.max.bytes."""
        return self._capacity

    @property
    def estimated_entry_bytes(self) -> int:
        """Average estimated bytes per entry so far (keys, values and bookkeeping)."""
        return self._size_sum // self._size_n if self._size_n else 0

    # -- internals ----------------------------------------------------------------------------

    def _inserted(self, key: K, value: V | None) -> None:
        """A new entry went in: maybe sample its size, then evict down to the capacity."""
        self._sample_countdown -= 1
        if not self._sample_countdown:
            self._sample(key, value)
        if len(self._cache) > self._capacity:
            self._evict()

    def _sample(self, key: K, value: V | None) -> None:
        """Fold one entry's estimated size into the average and recompute the capacity."""
        size = ENTRY_OVERHEAD + estimate_size(key)
        if value is not None:
            size += estimate_size(value)
        self._size_sum += size
        self._size_n += 1
        n = self._size_n
        if n >= _DECAY_AT:
            self._size_sum //= 2
            self._size_n = n = n // 2
        self._sample_countdown = 1 if n < _FULL_SAMPLES else _SAMPLE_EVERY
        by_bytes = max(1, self.max_bytes * n // self._size_sum)
        self._capacity = min(self.cache_size, by_bytes)

    def _evict(self) -> None:
        """Drop least recently used entries beyond the capacity; a dirty one is written down
        (with every other dirty entry) before it is dropped."""
        cache, dirty = self._cache, self._dirty
        while len(cache) > self._capacity:
            oldest = next(iter(cache))
            if oldest in dirty:
                self._write_dirty()
            cache.pop(oldest, None)  # the write-down may have forgotten it (not stored)
            self.evictions += 1

    def _write_dirty(self) -> None:
        """Write every dirty entry down (in chunks of WRITE_CHUNK); they become clean.

        A chunk is marked clean only once the layer below accepted it, so a failure (e.g. a
        value the serde cannot encode) leaves the rest dirty and raises; nothing is dropped.
        Every 16th written entry is sampled for the size estimate (values may have grown).
        """
        dirty = self._dirty
        if not dirty:
            return
        if self._journal:
            self._settle_journal()
        cache, write = self._cache, self._write_chunk
        if len(dirty) <= WRITE_CHUNK:
            items = [(key, cache[key]) for key in dirty]
            write(items)
            dirty.clear()
        else:
            keys = list(dirty)
            for i in range(0, len(keys), WRITE_CHUNK):
                chunk = keys[i : i + WRITE_CHUNK]
                items = [(key, cache[key]) for key in chunk]
                write(items)
                for key in chunk:
                    del dirty[key]
        if self._refused:
            self._forget_refused()
        sample = self._sample  # a smaller capacity takes effect at the next insert
        for key, value in items[::_SAMPLE_EVERY]:
            sample(key, value)

    def undo_write(self, key: Any, prior: Any) -> None:
        """Put ``key`` back as a skipped record found it (see millpond.stores.undo): a key
        that was clean or uncached is forgotten (the layer below holds its value, and a
        later get reads it), a dirty one gets its prior object back, still dirty."""
        if prior is _CLEAN:
            self._cache.pop(key, None)
            self._dirty.pop(key, None)
        else:
            self._cache[key] = prior
            self._dirty[key] = None

    def _settle_journal(self) -> None:
        """A write-down inside a record: the layer below is about to get the record's
        writes, so read the prior values of the record's clean keys from it first; the
        undo then writes them back down as dirty entries."""
        journal, inner_get = self._journal, self._inner_get
        assert journal is not None
        for i, (store, key, prior) in enumerate(journal):
            if store is self and prior is _CLEAN:
                journal[i] = (self, key, inner_get(key))

    def _write_chunk(self, items: Sequence[tuple[K, V | None]]) -> None:
        """One write_batch below, remembering the chunk so ``refused_at`` can name its keys."""
        self._writing = items
        try:
            self._inner_write_batch(items)
        finally:
            self._writing = ()

    def refused_at(self, index: int) -> None:
        """The layers below did not store entry ``index`` of the chunk being written down
        (a large value dropped by LargeMessageSafeStore): once the write-down is done, the
        cache forgets the key, so a later get reads what the store really holds."""
        self._refused.append(self._writing[index][0])

    def _forget_refused(self) -> None:
        cache, dirty = self._cache, self._dirty
        for key in self._refused:
            if key not in dirty:
                cache.pop(key, None)
        self._refused.clear()

    def _closed_error(self, op: str) -> StoreClosedError:
        return StoreClosedError(f"{op}: store is closed", store=self.name)

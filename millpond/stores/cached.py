"""CachedStore: an LRU write-back cache of deserialized objects (Samza's CachedStore).

It sits above the serialized layer, so a hit is one dict lookup: no serde, no engine call. It
holds clean entries, dirty entries (put or deleted since the last write-down) and misses (a
lookup that found nothing is cached as absent, so it does not reach the engine again).

Write-back: put/delete only mark the entry dirty. Dirty entries go down to the layer below in
``write_batch`` calls (each becomes one engine batch and one changelog record per key) at
``flush()`` (every commit calls it), before a scan (range/prefix/all then read the layer below),
when a dirty entry is about to be evicted, and when the number of dirty entries reaches
``write_batch_size``. So repeated writes to a key between commits cost one write-down.

Two ways a write costs nothing below (Kafka Streams' record cache absorbs the same):

- A key put after the cache saw that the layer below has no value for it (a cached miss) is
  *fresh* until it is written down; deleting a fresh key forgets the entry (a later get looks
  below and finds nothing): no engine write and no changelog record, not even a tombstone. A
  time window that opens and closes between two commits leaves nothing behind.
- With ``merge_scans`` (the key serde sorts as the objects do: string, bytes, millpond's
  integers), ``range`` lays the dirty entries in range over the scan of the layer below
  instead of writing every dirty entry down first. It does so while it is cheap: with more
  than MERGE_MIN dirty entries (fewer are written down, as before) and at most
  MERGES_PER_WRITE_DOWN times between write-downs (each such scan looks at every dirty key;
  a store scanned per record writes down instead).

Bounds (Samza's keys, plus one byte bound in the spirit of Kafka Streams'
``statestore.cache.max.bytes``): at most ``cache_size`` entries (object.cache.size; 0 = no
cache at all, the factory then leaves the layer out), at most ``write_batch_size`` dirty
entries (write.batch.size; 0 = write-through: every put is written down at once, the cache
still serves reads), and about ``max_bytes`` of memory (object.cache.max.bytes; 0 = no
cache). Each entry is charged its own estimated size, ``sys.getsizeof`` of key and value
(two levels into dicts, lists, tuples and sets) plus ~ENTRY_OVERHEAD bytes of bookkeeping:
at insert, at every delete, at every put where there was no value (a put after a ``get``
miss included: the miss was charged as an absent entry, the put charges the value), and at
one put in RECHARGE_EVERY over a present value (re-measuring every such put would halve the
cache's hit path; a value that grows is re-measured within a few of its puts). The charges
are summed and the least recently used entries are evicted while the sum is over
``max_bytes``. Shared sub-objects are counted once per entry, objects nested deeper than two
levels are not counted, and a value mutated in place is charged again only when it is put.

Admission: a full cache that hits under 1 lookup in SPARSE_RATIO (looked at every
REVIEW_EVERY misses: a table read at random and larger than the cache, as a stream-table
join's) caches only one in ADMIT_ONE_IN of the values its misses find; each of the others would
have been sized, charged and would have evicted an entry that missed as well. A key read
often still gets in, and once the hit ratio rises every value read is cached again. A miss
that finds nothing is always cached (freshness, above, depends on it).

The byte bound may be shared: a :class:`CacheBudget` divides one process-wide figure
between every cache registered with it (``set_max_bytes`` moves a cache's bound; the next
insert evicts down to it).

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

# Bytes per cached entry besides key and value: the OrderedDict slot and node (~91 measured)
# and the entry's charge in the size dict (a slot and an int, ~60).
ENTRY_OVERHEAD = 150
WRITE_CHUNK = 1000  # entries per write_batch call below at most, and about ...
WRITE_CHUNK_BYTES = 256 * 1024  # ... this many charged bytes: the serialized copies in flight
# A put over a present value re-measures it one time in this many (its size may have changed:
# a new object, or the same one mutated); a put where there was no value always is measured.
RECHARGE_EVERY = 32
MERGE_MIN = 64  # dirty entries below which a scan writes them down instead of merging
MERGES_PER_WRITE_DOWN = 8  # merged scans between two write-downs at most
# Admission of values read from below: every REVIEW_EVERY misses the cache looks at its hit
# ratio since the last look; full and hitting under 1 in SPARSE_RATIO, it caches only one in
# ADMIT_ONE_IN of the values its misses find (a miss that finds nothing is always cached).
REVIEW_EVERY = 4096
SPARSE_RATIO = 8
ADMIT_ONE_IN = 16
_MISS = object()
NOT_CACHED = _MISS  # what peek() returns for a key the cache holds nothing of
_CLEAN = object()  # journaled prior state: the layer below holds the key's value


_CONTAINERS = (list, tuple, set, frozenset)
_NESTED = (dict, *_CONTAINERS)  # what estimate_size looks into


def estimate_size(obj: object, depth: int = 2) -> int:
    """Rough memory of ``obj``: sys.getsizeof, plus its items for dicts, lists, tuples and sets,
    and theirs for items that are such containers themselves.

    Containers are looked into ``depth`` (two) levels deep (a session window's
    ``[[start, end, state]]``, a dict of lists), through at most 16 items a container (scaled
    up for larger ones). It is an estimate for the cache's byte bound, not an accounting.
    """
    size = getsizeof(obj)
    kind = type(obj)
    if kind is dict:
        n = len(obj)  # type: ignore[arg-type]
        if n and depth:
            part = 0
            for k, v in islice(obj.items(), 16):  # type: ignore[attr-defined]
                part += getsizeof(k) + (estimate_size(v, depth - 1) if type(v) in _NESTED
                                        else getsizeof(v))
            size += part * n // min(n, 16)
    elif kind in _CONTAINERS:
        n = len(obj)  # type: ignore[arg-type]
        if n and depth:
            part = 0
            for item in islice(obj, 16):  # type: ignore[call-overload]
                part += (estimate_size(item, depth - 1) if type(item) in _NESTED
                         else getsizeof(item))
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
        merge_scans: bool = False,
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
        self.reserved = 0  # bytes of max_bytes set aside for memory beside the cache (reserve)
        self._room = max_bytes  # what the entries may take: max_bytes less what is reserved
        self._cache: OrderedDict[K, V | None] = OrderedDict()  # None = known absent
        self._dirty: dict[K, None] = {}  # keys whose cached value is not written down yet
        self._fresh: set[K] = set()  # dirty keys the layer below holds no value of
        self.merge_scans = merge_scans  # keys sort as serialized: range() may merge
        self._merges = 0  # merged scans since the last write-down
        self._batch = max(1, write_batch_size)  # 0 = write-through: a write-down per write
        self._sizes: dict[K, int] = {}  # each entry's charge (bytes)
        self._bytes = 0  # the sum of the charges
        self.budget: CacheBudget | None = None  # the shared budget this cache is part of
        self._recharge = RECHARGE_EVERY  # puts over a present value until one is re-measured
        self._closed = False
        # Plain int counters (one add each; a metrics reporter reads them at scrape time).
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.not_admitted = 0  # values read from below and returned without caching them
        self._sparse = False  # admitting one in ADMIT_ONE_IN values read from below
        self._admit = ADMIT_ONE_IN  # misses until the next value admitted while sparse
        self._review = REVIEW_EVERY  # misses until the hit ratio is looked at again
        self._seen = (0, 0)  # hits and misses at the last look
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
            f"CachedStore({self.name!r}, {len(self._cache)}/{self.cache_size} cached, "
            f"~{self._bytes}/{self.max_bytes} B"
            + (f" ({self.reserved} B reserved)" if self.reserved else "") + ", "
            f"{len(self._dirty)} dirty, over {self.inner!r})"
        )

    # -- reads --------------------------------------------------------------------------------

    def get(self, key: K) -> V | None:
        """The cached object (a cached delete or miss is None, with no lookup below), else
        the inner store's value, which is then cached."""
        value = self._cache_get(key, _MISS)
        if value is _MISS:
            self.misses += 1
            self._review -= 1
            if not self._review:
                self._review_admission()
            value = self._inner_get(key)
            if value is not None and self._sparse and not self._admitted():
                return value
            self._cache[key] = value
            self._charge(key, value)
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
            self._review -= len(missing)
            if self._review <= 0:
                self._review_admission()
            below = self.inner.get_all(missing)
            cache = self._cache
            sparse = self._sparse
            for key in missing:
                got = below.get(key)
                if got is not None:
                    found[key] = got
                    if sparse and not self._admitted():
                        continue
                cache[key] = got
                self._charge(key, got, evict=False)
            self._evict()
        return found

    def peek(self, key: K) -> V | None | object:
        """The cached entry of ``key`` (None: a cached delete or miss) or :data:`NOT_CACHED`,
        touching neither the LRU order nor the hit/miss counters, and reading nothing below:
        a read on the task's behalf by someone else (millpond.query)."""
        return self._cache.get(key, NOT_CACHED)

    def dirty_items(self) -> list[tuple[K, V | None]]:
        """The entries not written down yet (value None: a delete), in no particular order:
        what a reader of the layers below must lay over them to see what the task sees."""
        cache = self._cache
        return [(key, cache[key]) for key in self._dirty]

    # -- writes -------------------------------------------------------------------------------

    def put(self, key: K, value: V) -> None:
        """Cache ``value`` (this very object) as dirty; it is written down later."""
        if self._closed:
            raise self._closed_error("put")
        cache = self._cache
        old = self._cache_get(key, _MISS)
        journal = self._journal
        if journal is not None:  # a record being processed: note what to put back on a skip
            journal.append((self, key, old if key in self._dirty else _CLEAN))
        if old is not _MISS:
            self._touch(key)
        cache[key] = value
        dirty = self._dirty
        if key not in dirty:
            if old is None:  # a clean miss: the layer below holds nothing for the key
                self._fresh.add(key)
            dirty[key] = None
            if len(dirty) >= self._batch:
                self._write_dirty()
        if old is _MISS:  # a new entry
            self._charge(key, value)
        elif old is None:  # a value where none was (a miss): the key is charged already
            sizes = self._sizes
            if key in sizes:
                size = estimate_size(value)
                sizes[key] += size
                self._bytes += size
                if self._bytes > self._room:
                    self._evict()
            else:
                self._charge(key, value)
        else:  # a value over a value: re-measured one put in RECHARGE_EVERY
            self._recharge -= 1
            if not self._recharge:
                self._recharge = RECHARGE_EVERY
                self._charge(key, value)

    def put_new(self, key: K, value: V) -> None:
        """put() of a key the caller knows holds no value: an uncached key is taken as a get
        would have found it below (absent, so the entry is fresh until written down) without
        the lookup; a cached one is an ordinary put (a dirty delete must still go down)."""
        if not self._closed and key not in self._cache:
            self._cache[key] = None  # what the get's miss would have cached (uncharged)
        self.put(key, value)

    def delete(self, key: K) -> None:
        """Cache a dirty absence: get() sees the delete at once, the layer below at write-down."""
        if self._closed:
            raise self._closed_error("delete")
        cache = self._cache
        journal = self._journal
        dirty = self._dirty
        if journal is not None:
            journal.append((self, key, cache[key] if key in dirty else _CLEAN))
        fresh = self._fresh
        if key in fresh:  # never written down: nothing below to delete, forget the entry
            fresh.discard(key)
            del dirty[key]
            del cache[key]
            self._bytes -= self._sizes.pop(key, 0)
            return
        if key in cache:
            self._touch(key)
        cache[key] = None
        if key not in dirty:
            dirty[key] = None
            if len(dirty) >= self._batch:
                self._write_dirty()
        self._charge(key, None)

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
        """The layer below's entries in range with the dirty ones laid over them (see
        ``merge_scans``: those are the cached objects themselves), else write every dirty
        entry down and scan the layer below (fresh objects, not cached ones)."""
        dirty = self._dirty
        if (not self.merge_scans or len(dirty) <= MERGE_MIN
                or self._merges >= MERGES_PER_WRITE_DOWN):
            self._write_dirty()
            return self.inner.range(start, end)
        self._merges += 1
        cache = self._cache
        over = sorted([(key, cache[key]) for key in dirty
                       if start <= key < end])  # type: ignore[operator]
        below = self.inner.range(start, end)
        return _Merged(below, over) if over else below

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
        """Write every dirty entry down, then flush the layers below."""
        self.write_down()
        self.inner.flush()

    def write_down(self) -> None:
        """Write every dirty entry down, flushing nothing below (a commit's first phase: the
        engine's memtables are flushed only when the store is checkpointed locally)."""
        if self._closed:
            raise self._closed_error("flush")
        self._write_dirty()

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
            self._fresh.clear()
            self._sizes.clear()
            self._bytes = 0
            if self.budget is not None:
                self.budget.unregister(self)
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
        average entry's charge times that would exceed object.cache.max.bytes."""
        per_entry = self.estimated_entry_bytes
        if not per_entry:
            return self.cache_size
        return max(1, min(self.cache_size, self._room // per_entry))

    @property
    def estimated_bytes(self) -> int:
        """The sum of the entries' charges: what the byte bound holds under max_bytes."""
        return self._bytes

    @property
    def estimated_entry_bytes(self) -> int:
        """Average charge per entry now (keys, values and bookkeeping)."""
        n = len(self._sizes)
        return self._bytes // n if n else 0

    def set_max_bytes(self, max_bytes: int) -> None:
        """Move the byte bound (a shared budget's new share); the next insert evicts down."""
        if max_bytes <= 0:
            raise StoreConfigError(f"object.cache.max.bytes must be > 0, got {max_bytes}",
                                   store=self.name)
        self.max_bytes = max_bytes
        self._room = max(1, max_bytes - self.reserved)

    def reserve(self, nbytes: int) -> None:
        """Set ``nbytes`` of the byte bound aside for memory that lives beside the cache and
        indexes the same store (a window operator's in-memory index of its windows): the
        entries keep within ``max_bytes - nbytes``, so cache and index together stay within
        the bound the memory plan gave the cache. Replaces the previous reservation; a cache
        now over its room evicts at once."""
        self.reserved = max(0, nbytes)
        self._room = max(1, self.max_bytes - self.reserved)
        if self._bytes > self._room and not self._closed:
            self._evict()

    # -- internals ----------------------------------------------------------------------------

    def _review_admission(self) -> None:
        """Look at the hit ratio since the last look (every REVIEW_EVERY misses): a full cache
        that hits under 1 in SPARSE_RATIO lookups (a table read at random, larger than the
        cache: each value read from below evicts one that will miss too) caches one value
        read from below in ADMIT_ONE_IN, so the misses skip sizing, charging and evicting;
        a key read often still gets in, and once the hit ratio rises every value does again."""
        self._review = REVIEW_EVERY
        hits, misses = self.hits - self._seen[0], self.misses - self._seen[1]
        self._seen = (self.hits, self.misses)
        full = (len(self._cache) * 10 >= self.cache_size * 9
                or self._bytes * 10 >= self._room * 9)
        self._sparse = full and hits * SPARSE_RATIO < hits + misses

    def _admitted(self) -> bool:
        """While sparse: whether this value read from below is the one in ADMIT_ONE_IN."""
        self._admit -= 1
        if self._admit:
            self.not_admitted += 1
            return False
        self._admit = ADMIT_ONE_IN
        return True

    def _charge(self, key: K, value: V | None, evict: bool = True) -> None:
        """Charge ``key``'s entry its size now (replacing its previous charge), then evict
        least recently used entries while the cache is over either bound."""
        size = ENTRY_OVERHEAD + estimate_size(key)
        if value is not None:
            size += estimate_size(value)
        sizes = self._sizes
        self._bytes += size - sizes.get(key, 0)
        sizes[key] = size
        if evict and (self._bytes > self._room or len(self._cache) > self.cache_size):
            self._evict()

    def _evict(self) -> None:
        """Drop least recently used entries beyond the bounds; a dirty one is written down
        (with every other dirty entry) before it is dropped. The most recent entry stays."""
        cache, dirty, sizes = self._cache, self._dirty, self._sizes
        while len(cache) > 1 and (self._bytes > self._room or len(cache) > self.cache_size):
            oldest = next(iter(cache))
            if oldest in dirty:
                self._write_dirty()
            cache.pop(oldest, None)  # the write-down may have forgotten it (not stored)
            self._bytes -= sizes.pop(oldest, 0)
            self.evictions += 1

    def _write_dirty(self) -> None:
        """Write every dirty entry down (in chunks of at most WRITE_CHUNK entries and about
        WRITE_CHUNK_BYTES at the cache's average charge per entry: each chunk's serialized
        copies, engine batch and changelog records are in memory at once); they become clean.

        A chunk is marked clean only once the layer below accepted it, so a failure (e.g. a
        value the serde cannot encode) leaves the rest dirty and raises; nothing is dropped.
        """
        dirty = self._dirty
        if not dirty:
            return
        if self._journal:
            self._settle_journal()
        self._merges = 0
        self._fresh.clear()  # (first: a chunk that fails part-way may be below)
        per_chunk = self._chunk_entries()
        if len(dirty) <= per_chunk:
            cache = self._cache
            self._write_chunk([(key, cache[key]) for key in dirty])
            dirty.clear()
        else:
            keys = list(dirty)
            for i in range(0, len(keys), per_chunk):
                self._write_keys(keys[i : i + per_chunk])
        if self._refused:
            self._forget_refused()

    def write_ahead(self, limit: int) -> int:
        """Write down up to ``limit`` of the entries dirty longest (oldest first), at most
        one write-down chunk, between records; returns how many. An idle run loop calls it
        before a commit is due so the commit, which stops processing, has fewer to write;
        a key written now and again before the commit is written twice (the caller bounds
        that to one pass)."""
        dirty = self._dirty
        if not dirty or self._closed or self._journal or limit <= 0:
            return 0
        keys = list(islice(dirty, min(limit, self._chunk_entries())))
        self._write_keys(keys)
        if self._refused:
            self._forget_refused()
        return len(keys)

    def _chunk_entries(self) -> int:
        """Entries per write-down chunk: at most WRITE_CHUNK, and about WRITE_CHUNK_BYTES at
        the cache's average charge per entry."""
        average = self._bytes // max(1, len(self._cache))  # charged bytes of an entry
        return max(1, min(WRITE_CHUNK, WRITE_CHUNK_BYTES // max(1, average)))

    def _write_keys(self, keys: Sequence[K]) -> None:
        """Write ``keys``' dirty entries down as one chunk; they become clean once the layer
        below accepted it."""
        cache, dirty = self._cache, self._dirty
        self._fresh.difference_update(keys)
        self._write_chunk([(key, cache[key]) for key in keys])
        for key in keys:
            del dirty[key]

    def undo_write(self, key: Any, prior: Any) -> None:
        """Put ``key`` back as a skipped record found it (see millpond.stores.undo): a key
        that was clean or uncached is forgotten (the layer below holds its value, and a
        later get reads it), a dirty one gets its prior object back, still dirty."""
        if prior is _CLEAN:
            self._cache.pop(key, None)
            self._dirty.pop(key, None)
            self._fresh.discard(key)
            self._bytes -= self._sizes.pop(key, 0)
        else:
            self._cache[key] = prior
            self._dirty[key] = None
            self._charge(key, prior, evict=False)

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
        """One write_batch below, remembering the chunk so ``refused_at`` can name its keys.
        Deletes written down are forgotten: the entries would only say "absent" (a later
        get asks below), and a store whose keys come and go (windows) keeps no trail."""
        self._writing = items
        try:
            self._inner_write_batch(items)
        finally:
            self._writing = ()
        cache, sizes = self._cache, self._sizes
        freed = 0
        for key, value in items:
            if value is None and cache.get(key, _MISS) is None:
                del cache[key]
                freed += sizes.pop(key, 0)
        self._bytes -= freed

    def refused_at(self, index: int) -> None:
        """The layers below did not store entry ``index`` of the chunk being written down
        (a large value dropped by LargeMessageSafeStore): once the write-down is done, the
        cache forgets the key, so a later get reads what the store really holds."""
        self._refused.append(self._writing[index][0])

    def _forget_refused(self) -> None:
        cache, dirty = self._cache, self._dirty
        for key in self._refused:
            if key not in dirty and key in cache:
                del cache[key]
                self._bytes -= self._sizes.pop(key, 0)
        self._refused.clear()

    def _closed_error(self, op: str) -> StoreClosedError:
        return StoreClosedError(f"{op}: store is closed", store=self.name)


class _Merged(KeyValueIterator[K, V]):
    """A scan of the layer below with the cache's dirty entries in range laid over it: a
    dirty value replaces or adds its key, a dirty delete hides it. Both sides are sorted by
    key; ``over`` is a snapshot taken when the scan began, as the layer below's is."""

    __slots__ = ("_below", "_over", "_i", "_next")

    def __init__(self, below: KeyValueIterator[K, V], over: list[tuple[K, V | None]]) -> None:
        self._below = below
        self._over = over
        self._i = 0
        self._next: tuple[K, V] | None = self._pull()

    def _pull(self) -> tuple[K, V] | None:
        for item in self._below:
            return item
        return None

    def __next__(self) -> tuple[K, V]:
        over, below = self._over, self._next
        while True:
            i = self._i
            if i < len(over):
                key, value = over[i]
                if below is None or key <= below[0]:  # type: ignore[operator]
                    self._i = i + 1
                    if below is not None and key == below[0]:
                        below = self._next = self._pull()  # replaced or hidden
                    if value is None:
                        continue
                    return key, value
            if below is None:
                raise StopIteration
            self._next = self._pull()
            return below

    def close(self) -> None:
        self._below.close()
        self._over = []
        self._next = None


class CacheBudget:
    """One byte bound shared by the object caches of a process: each registered cache's
    ``max_bytes`` is an equal share of ``total`` (caches whose store sets its own
    object.cache.max.bytes are not registered). Registering or closing a cache moves the
    others' shares; a cache over its new share evicts at its next insert."""

    def __init__(self, total: int) -> None:
        if total <= 0:
            raise StoreConfigError(f"the object caches' budget must be > 0, got {total}")
        self.total = total
        self._caches: list[CachedStore[Any, Any]] = []

    def register(self, cache: CachedStore[Any, Any]) -> None:
        """Give ``cache`` a share (and the other caches a smaller one)."""
        cache.budget = self
        self._caches.append(cache)
        self._share()

    def unregister(self, cache: CachedStore[Any, Any]) -> None:
        """A closed cache's share goes back to the others."""
        if cache in self._caches:
            self._caches.remove(cache)
            self._share()

    @property
    def caches(self) -> int:
        """How many caches share the budget now."""
        return len(self._caches)

    def share(self) -> int:
        """Each registered cache's bound now (the whole budget when none is registered)."""
        return max(1, self.total // max(1, len(self._caches)))

    def used(self) -> int:
        """The sum of the registered caches' charges and reservations."""
        return sum(cache.estimated_bytes + cache.reserved for cache in self._caches)

    def by_store(self) -> dict[str, int]:
        """The registered caches' charges and reservations summed per store name (over its
        tasks)."""
        out: dict[str, int] = {}
        for cache in self._caches:
            out[cache.name] = out.get(cache.name, 0) + cache.estimated_bytes + cache.reserved
        return out

    def _share(self) -> None:
        each = self.share()
        for cache in self._caches:
            cache.set_max_bytes(each)


_process_budget: CacheBudget | None = None


def use_cache_budget(total: int) -> CacheBudget:
    """Make (or resize) the process's shared object-cache budget (the memory plan's)."""
    global _process_budget
    if _process_budget is None:
        _process_budget = CacheBudget(total)
    elif _process_budget.total != total:
        _process_budget.total = total
        _process_budget._share()
    return _process_budget


def cache_budget() -> CacheBudget | None:
    """The process's shared object-cache budget, if a memory plan set one."""
    return _process_budget

"""Store layers: null-safe -> cached -> serialized stacks over both engines, the object cache's
write-back and bounds, the logged layer, and the factory's layer order."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from millpond.changelog.logged import LoggedStore
from millpond.config import SerdeSpec
from millpond.serdes import (
    BytesSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    Serde,
    SerdeError,
    StringSerde,
    build_serde,
)
from millpond.stores import (
    CachedStore,
    InMemoryEngine,
    KeyValueIterator,
    KeyValueStore,
    NoneEntryError,
    NullSafeStore,
    RocksDbEngine,
    RocksDbOptions,
    SerializedStore,
    StoreClosedError,
    StoreConfigError,
    StoreError,
    build_stack,
    build_store,
)
from millpond.stores.api import BytesStore
from millpond.stores.cached import (
    ENTRY_OVERHEAD,
    RECHARGE_EVERY,
    WRITE_CHUNK,
    CacheBudget,
    estimate_size,
)

MiB = 1024 * 1024
SMALL = RocksDbOptions(block_cache_size_bytes=8 * MiB, write_buffer_size_bytes=4 * MiB)


def make_engine(kind: str, tmp_path: Path) -> BytesStore:
    if kind == "rocksdb":
        return RocksDbEngine(tmp_path / "db", SMALL)
    return InMemoryEngine()


# (engine, cache_size, write_batch_size): no cache, a tiny cache that evicts constantly, a big
# one, and a write-through cache (write.batch.size 0)
STACKS = [
    (engine, cache, batch)
    for engine in ("rocksdb", "memory")
    for cache, batch in ((0, 500), (3, 2), (1000, 500), (1000, 0))
]


def stack_id(p: tuple[str, int, int]) -> str:
    return f"{p[0]}-cache{p[1]}-batch{p[2]}"


@pytest.fixture(params=STACKS, ids=stack_id)
def layout(request: pytest.FixtureRequest) -> tuple[str, int, int]:
    return request.param


def open_store(
    layout: tuple[str, int, int],
    tmp_path: Path,
    key_serde: Serde[Any] | None = None,
    msg_serde: Serde[Any] | None = None,
) -> tuple[KeyValueStore[Any, Any], BytesStore]:
    kind, cache, batch = layout
    engine = make_engine(kind, tmp_path)
    store = build_store(
        "counts", engine, key_serde or StringSerde(), msg_serde or JsonSerde(), cache, batch
    )
    return store, engine


@pytest.fixture
def store(layout: tuple[str, int, int], tmp_path: Path) -> Iterator[KeyValueStore[Any, Any]]:
    kv, _ = open_store(layout, tmp_path)
    yield kv
    kv.close()


def keys_of(it: KeyValueIterator[Any, Any]) -> list[Any]:
    with it:
        return [k for k, _ in it]


# -- every method through every stack ----------------------------------------------------------


def test_put_get_delete(store: KeyValueStore[Any, Any]) -> None:
    assert store.get("a") is None
    store.put("a", {"n": 1})
    assert store.get("a") == {"n": 1}
    store.put("a", [2])
    assert store.get("a") == [2]
    store.delete("a")
    assert store.get("a") is None
    store.delete("never")


def test_get_all_put_all_delete_all(store: KeyValueStore[Any, Any]) -> None:
    store.put_all([("a", 1), ("b", 2), ("c", 3), ("a", 4)])
    assert store.get_all(["a", "b", "zz"]) == {"a": 4, "b": 2}
    store.delete_all(["a", "c"])
    assert store.get_all(["a", "b", "c"]) == {"b": 2}
    assert store.get_all([]) == {}


def test_scans_see_unflushed_writes_in_serialized_key_order(
    store: KeyValueStore[Any, Any],
) -> None:
    words = ["pear", "apple", "apricot", "banana", "ap", "b", "a", "ápfel"]
    for i, word in enumerate(words):
        store.put(word, i)
    store.delete("banana")
    expected = sorted(w for w in words if w != "banana")
    expected.sort(key=str.encode)  # order is that of the utf-8 bytes ("ápfel" last)
    assert keys_of(store.all()) == expected
    assert keys_of(store.prefix("ap")) == ["ap", "apple", "apricot"]
    assert keys_of(store.range("apple", "b")) == ["apple", "apricot"]
    with store.range("a", "b") as it:
        assert dict(it) == {"a": 6, "ap": 4, "apple": 1, "apricot": 2}


@pytest.mark.parametrize("serde", [IntegerSerde(), LongSerde()], ids=["integer", "long"])
def test_numeric_keys_range_in_numeric_order(
    layout: tuple[str, int, int], tmp_path: Path, serde: Serde[int]
) -> None:
    store, _ = open_store(layout, tmp_path, key_serde=serde, msg_serde=BytesSerde())
    numbers = list(range(-300, 301, 7)) + [-(2**31), 2**31 - 1, -1, 0, 1]
    random.Random(5).shuffle(numbers)
    for n in numbers:
        store.put(n, str(n).encode())
    assert keys_of(store.all()) == sorted(set(numbers))
    assert keys_of(store.range(-20, 20)) == [n for n in sorted(set(numbers)) if -20 <= n < 20]
    assert keys_of(store.range(5, -5)) == []
    with store.range(-1, 1) as it:
        assert list(it) == [(-1, b"-1"), (0, b"0")]
    store.close()


def test_iterator_close_and_store_close(layout: tuple[str, int, int], tmp_path: Path) -> None:
    store, _ = open_store(layout, tmp_path)
    store.put_all([(str(i), i) for i in range(10)])
    with store.all() as it:
        assert next(it) == ("0", 0)
    with pytest.raises(StoreClosedError):
        next(it)
    left_open = store.prefix("")
    next(left_open)
    store.close()
    with pytest.raises(StoreClosedError):
        next(left_open)
    store.close()  # idempotent


def test_closed_store_refuses_use_and_names_the_store(
    layout: tuple[str, int, int], tmp_path: Path
) -> None:
    store, _ = open_store(layout, tmp_path)
    store.close()
    for call in (
        lambda: store.put("k", 1),
        lambda: store.get("k"),
        lambda: store.delete("k"),
        lambda: store.all(),
        lambda: store.range("a", "b"),
        lambda: store.flush(),
    ):
        with pytest.raises(StoreClosedError, match="store 'counts'"):
            call()


def test_rocksdb_stack_reopens_with_flushed_data(tmp_path: Path) -> None:
    layout = ("rocksdb", 1000, 500)
    store, _ = open_store(layout, tmp_path)
    store.put_all([("a", 1), ("b", 2)])
    store.delete("b")
    it = store.all()  # open while closing: close() must release it
    store.close()  # flushes the cache first
    del it
    again, _ = open_store(layout, tmp_path)
    assert keys_of(again.all()) == ["a"]
    again.close()


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda s: s.put(None, 1), "key must not be None"),
        (lambda s: s.put("k", None), "value must not be None"),
        (lambda s: s.get(None), "key must not be None"),
        (lambda s: s.delete(None), "key must not be None"),
        (lambda s: s.put_all([("a", 1), ("b", None)]), "value must not be None"),
        (lambda s: s.get_all(["a", None]), "key must not be None"),
        (lambda s: s.delete_all([None]), "key must not be None"),
        (lambda s: s.range(None, "z"), "start must not be None"),
        (lambda s: s.prefix(None), "prefix must not be None"),
    ],
)
def test_none_is_rejected_with_the_store_name(
    store: KeyValueStore[Any, Any], call: Any, what: str
) -> None:
    with pytest.raises(NoneEntryError, match=f"store 'counts': .*{what}"):
        call(store)
    assert store.get("a") is None  # a rejected put_all wrote nothing


def test_serde_errors_name_store_and_serde(layout: tuple[str, int, int], tmp_path: Path) -> None:
    # With a write-back cache a put is only cached: the value is serialized at write-down
    # (flush, i.e. the commit), and then the error names the store and the key. The entry stays
    # dirty (nothing is dropped silently): the commit fails and the job stops.
    bad_key, _ = open_store(layout, tmp_path / "a")
    with pytest.raises(SerdeError, match="store 'counts': serde 'string': cannot serialize int"):
        bad_key.put(5, "v")
        bad_key.flush()
    bad_value, _ = open_store(layout, tmp_path / "b")
    with pytest.raises(SerdeError, match="store 'counts': serde 'json': cannot serialize") as bad:
        bad_value.put("k", {1, 2})
        bad_value.flush()
    if layout[1]:  # through the cache: the write-down names the key
        assert "(key 'k', written down at flush)" in str(bad.value)
        with pytest.raises(SerdeError):
            bad_value.flush()  # still dirty
    bad_value.put("k", [1, 2])  # replaces the value that could not be written
    bad_value.flush()
    assert bad_value.get("k") == [1, 2]
    bad_value.close()
    store, engine = open_store(layout, tmp_path / "c")
    engine.put(b"bad", b"{not json")  # written below the serdes
    with pytest.raises(SerdeError, match="store 'counts': serde 'json': cannot deserialize"):
        store.get("bad")
    with pytest.raises(SerdeError, match="store 'counts'") as info:
        keys_of(store.all())
    assert info.value.store == "counts"
    store.close()


def test_store_errors_from_engines_name_the_store() -> None:
    store = SerializedStore(InMemoryEngine(), StringSerde(), StringSerde(), "orders")
    store.close()
    with pytest.raises(StoreError, match="^store 'orders': in-memory store: get: store is closed$"):
        store.get("x")


def layers(store: Any) -> list[type]:
    """The classes of a stack, top to bottom (each layer keeps the next in ``inner``)."""
    out = []
    while store is not None:
        out.append(type(store))
        store = getattr(store, "inner", None)
    return out


def test_factory_stacks_layers_in_samza_order(tmp_path: Path) -> None:
    key = build_serde(
        SerdeSpec("ids", "org.apache.samza.serializers.LongSerdeFactory", {}, "job.properties:3")
    )
    msg = build_serde(SerdeSpec("json", "json", {}, "job.properties:4"))
    store = build_store("s", RocksDbEngine(tmp_path / "db", SMALL), key, msg)
    assert layers(store) == [NullSafeStore, CachedStore, SerializedStore, RocksDbEngine]
    store.put(-7, {"x": 1})
    assert store.get(-7) == {"x": 1}
    store.close()
    for off in ({"object_cache_size": 0}, {"cache_max_bytes": 0}):
        plain = build_store("p", InMemoryEngine(), key, msg, **off)  # type: ignore[arg-type]
        assert layers(plain) == [NullSafeStore, SerializedStore, InMemoryEngine]
    producer = RecordingProducer()
    stack = build_stack(
        "l", InMemoryEngine(), key, msg,
        logged=lambda engine: LoggedStore(engine, producer, "cl", 0),  # type: ignore[arg-type]
    )
    assert layers(stack.store) == [
        NullSafeStore, CachedStore, SerializedStore, LoggedStore, InMemoryEngine]
    assert stack.logged is stack.store.inner.inner.inner  # type: ignore[attr-defined]
    assert stack.engine is stack.logged.inner


# -- the object cache's write-back, against a counting fake of the layer below ------------------


class CountingStore(KeyValueStore[str, Any]):
    """The typed layer under the cache: records every call, keeps data in a real stack."""

    def __init__(self) -> None:
        self.data: KeyValueStore[str, Any] = SerializedStore(
            InMemoryEngine(), StringSerde(), JsonSerde(), "inner"
        )
        self.calls: Counter[str] = Counter()
        self.batches: list[list[tuple[str, Any]]] = []

    def get(self, key: str) -> Any:
        self.calls["get"] += 1
        return self.data.get(key)

    def get_all(self, keys: Iterable[str]) -> dict[str, Any]:
        self.calls["get_all"] += 1
        return self.data.get_all(keys)

    def put(self, key: str, value: Any) -> None:
        self.calls["put"] += 1
        self.data.put(key, value)

    def put_all(self, items: Iterable[tuple[str, Any]]) -> None:
        self.calls["put_all"] += 1
        self.data.put_all(items)

    def delete(self, key: str) -> None:
        self.calls["delete"] += 1
        self.data.delete(key)

    def delete_all(self, keys: Iterable[str]) -> None:
        self.calls["delete_all"] += 1
        self.data.delete_all(keys)

    def write_batch(self, items: Sequence[tuple[str, Any]]) -> None:
        self.calls["write_batch"] += 1
        self.batches.append(list(items))
        self.data.write_batch(items)

    def range(self, start: str, end: str) -> KeyValueIterator[str, Any]:
        self.calls["range"] += 1
        return self.data.range(start, end)

    def prefix(self, prefix: str) -> KeyValueIterator[str, Any]:
        self.calls["prefix"] += 1
        return self.data.prefix(prefix)

    def all(self) -> KeyValueIterator[str, Any]:
        self.calls["all"] += 1
        return self.data.all()

    def flush(self) -> None:
        self.calls["flush"] += 1

    def close(self) -> None:
        self.calls["close"] += 1
        self.data.close()


@pytest.fixture
def inner() -> CountingStore:
    return CountingStore()


def cached(inner: CountingStore, size: int = 100, batch: int = 50, **kw: int) -> CachedStore[str, Any]:
    return CachedStore(inner, "counts", size, batch, **kw)


def test_write_back_at_flush_one_write_per_key(inner: CountingStore) -> None:
    cache = cached(inner)
    for i in range(10):
        cache.put("k", i)
        cache.put("other", [i])
    assert cache.get("k") == 9
    assert inner.calls == Counter()  # nothing went down yet, not even a get
    cache.flush()  # the commit
    assert inner.batches == [[("k", 9), ("other", [9])]]
    assert inner.calls == Counter(write_batch=1, flush=1)
    assert cache.dirty_count == 0
    cache.flush()  # nothing dirty: no second batch
    assert inner.calls["write_batch"] == 1
    assert inner.data.get("k") == 9


def test_a_hit_returns_the_cached_object_without_calling_below(inner: CountingStore) -> None:
    inner.data.put("k", {"n": 1})
    cache = cached(inner)
    first = cache.get("k")
    assert cache.get("k") is first  # one deserialization, then the same object
    assert inner.calls == Counter(get=1)
    value = {"n": 2}
    cache.put("k", value)
    assert cache.get("k") is value  # the object the task put


def test_dirty_count_reaching_write_batch_size_writes_one_batch(inner: CountingStore) -> None:
    cache = cached(inner, batch=3)
    cache.put("a", 1)
    cache.delete("b")
    assert inner.batches == []
    cache.put("c", 3)
    assert inner.batches == [[("a", 1), ("b", None), ("c", 3)]]
    assert cache.dirty_count == 0
    assert inner.calls["flush"] == 0  # a write-down is not a flush


def test_evicting_a_dirty_entry_writes_all_dirty_entries(inner: CountingStore) -> None:
    cache = cached(inner, size=2, batch=100)
    cache.put("a", 1)
    cache.put("b", 2)
    assert inner.batches == []
    cache.put("c", 3)  # evicts a (dirty): a, b and c go down in one batch
    assert inner.batches == [[("a", 1), ("b", 2), ("c", 3)]]
    assert cache.dirty_count == 0 and cache.cached_count == 2
    assert cache.get("a") == 1  # no longer cached: read from below
    assert inner.calls["get"] == 1


def test_evicting_clean_entries_writes_nothing(inner: CountingStore) -> None:
    inner.data.put_all([(f"x{i}", "v") for i in range(5)])
    cache = cached(inner, size=2)
    for i in range(5):
        assert cache.get(f"x{i}") == "v"
    assert inner.calls == Counter(get=5)


def test_gets_of_deleted_and_missing_keys_stay_in_the_cache(inner: CountingStore) -> None:
    inner.data.put("k", "old")
    cache = cached(inner, size=10, batch=10)
    cache.delete("k")
    assert cache.get("k") is None
    assert cache.get("k") is None
    assert inner.calls["get"] == 0  # the cached delete answered
    assert cache.get("nope") is None
    assert cache.get("nope") is None
    assert inner.calls["get"] == 1  # the miss is cached as well
    cache.flush()
    assert inner.batches == [[("k", None)]]
    assert inner.data.get("k") is None


def test_get_refreshes_recency(inner: CountingStore) -> None:
    cache = cached(inner, size=2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.flush()
    cache.get("a")  # a is now most recent, b is the LRU entry
    cache.put("c", 3)  # evicts b (clean): no write
    assert inner.calls["write_batch"] == 1
    calls_before = inner.calls["get"]
    assert cache.get("a") == 1
    assert inner.calls["get"] == calls_before
    assert cache.get("b") == 2
    assert inner.calls["get"] == calls_before + 1


def test_get_all_uses_the_cache_and_one_inner_call(inner: CountingStore) -> None:
    inner.data.put_all([("a", 1), ("b", 2)])
    cache = cached(inner, size=10, batch=10)
    cache.put("c", 3)
    cache.delete("a")
    assert cache.get_all(["a", "b", "c", "d"]) == {"b": 2, "c": 3}
    assert inner.calls == Counter(get_all=1)
    assert cache.get_all(["b", "d"]) == {"b": 2}
    assert inner.calls == Counter(get_all=1)


def test_scans_see_cached_writes(inner: CountingStore) -> None:
    cache = cached(inner, size=10, batch=10)
    cache.put("b", 2)
    cache.put("a", 1)
    with cache.all() as it:
        assert list(it) == [("a", 1), ("b", 2)]
    assert inner.calls["write_batch"] == 1
    cache.put("ab", 3)
    assert [k for k, _ in cache.prefix("a")] == ["a", "ab"]
    cache.delete("a")
    assert [k for k, _ in cache.range("a", "b")] == ["ab"]
    assert inner.calls["write_batch"] == 3
    assert cache.get("ab") == 3 and inner.calls["get"] == 0  # written down, still cached


def test_write_batch_into_the_cache_marks_entries_dirty(inner: CountingStore) -> None:
    cache = cached(inner, size=10, batch=10)
    cache.write_batch([("a", 1), ("b", None)])
    cache.put_all([("c", 3)])
    cache.delete_all(["c"])
    assert inner.calls == Counter()
    cache.flush()
    assert inner.batches == [[("a", 1), ("b", None), ("c", None)]]


def test_write_batch_size_zero_writes_through(inner: CountingStore) -> None:
    cache = cached(inner, size=10, batch=0)  # write.batch.size=0: Samza's "off"
    cache.put("a", 1)
    cache.put("a", 2)
    cache.delete("b")
    assert inner.batches == [[("a", 1)], [("a", 2)], [("b", None)]]
    assert cache.get("a") == 2 and inner.calls["get"] == 0  # reads still hit the cache
    cache.flush()
    assert inner.calls["write_batch"] == 3


@pytest.mark.parametrize("off", [{"object_cache_size": 0}, {"cache_max_bytes": 0}])
def test_zero_cache_size_or_bytes_leaves_the_cache_out(off: dict[str, int]) -> None:
    engine = InMemoryEngine()
    store = build_store("p", engine, StringSerde(), JsonSerde(), **off)  # type: ignore[arg-type]
    store.put("a", [1])
    assert engine.get(b"a") == b"[1]"  # written at once
    assert store.get("a") == [1] and store.get("a") is not store.get("a")  # no object cache


def test_close_flushes_then_closes_and_refuses_writes(inner: CountingStore) -> None:
    cache = cached(inner, size=10, batch=10)
    cache.put("a", 1)
    cache.close()
    assert inner.batches == [[("a", 1)]]
    assert inner.calls["flush"] == 1 and inner.calls["close"] == 1
    cache.close()
    assert inner.calls["close"] == 1
    for call in (lambda: cache.put("b", 2), lambda: cache.delete("b"), cache.flush):
        with pytest.raises(StoreClosedError, match="^store 'counts': .*store is closed"):
            call()


@pytest.mark.parametrize(
    ("size", "batch", "max_bytes", "message"),
    [
        (-1, 10, 100, "object.cache.size must be >= 0"),
        (10, -1, 100, "write.batch.size must be >= 0"),
        (10, 10, -1, "object.cache.max.bytes must be >= 0"),
        (0, 10, 100, "0 turns the cache off"),
        (10, 10, 0, "0 turns the cache off"),
    ],
)
def test_cached_store_rejects_bad_sizes(
    inner: CountingStore, size: int, batch: int, max_bytes: int, message: str
) -> None:
    with pytest.raises(StoreConfigError, match=message):
        CachedStore(inner, "counts", size, batch, max_bytes)


def test_cache_stays_bounded(inner: CountingStore) -> None:
    cache = cached(inner, size=5, batch=3)
    for i in range(100):
        cache.put(f"{i:03d}", i)
        cache.get(f"{i // 2:03d}")
        assert cache.cached_count <= 5
    cache.flush()
    with inner.data.all() as it:
        assert [k for k, _ in it] == [f"{i:03d}" for i in range(100)]
    assert all(len(batch) <= 3 for batch in inner.batches)


def test_large_write_downs_go_in_chunks_and_lose_nothing(inner: CountingStore) -> None:
    n = WRITE_CHUNK * 2 + 5
    cache = cached(inner, size=n + 10, batch=n + 10)
    for i in range(n):
        cache.put(f"k{i:06d}", i)
    cache.flush()
    assert [len(b) for b in inner.batches] == [WRITE_CHUNK, WRITE_CHUNK, 5]
    assert inner.data.get("k000000") == 0 and inner.data.get(f"k{n - 1:06d}") == n - 1


# -- the byte bound ----------------------------------------------------------------------------


def test_byte_bound_limits_the_number_of_entries(inner: CountingStore) -> None:
    value = "x" * 1000  # ~1 kB each: 100 kB holds about 85 of them
    cache = cached(inner, size=10_000, batch=10_000, max_bytes=100_000)
    for i in range(1000):
        cache.put(f"k{i:04d}", value)
    per_entry = ENTRY_OVERHEAD + estimate_size("k0000") + estimate_size(value)
    assert cache.estimated_entry_bytes == per_entry
    assert cache.cached_count == 100_000 // per_entry == cache.capacity
    assert cache.estimated_bytes <= 100_000
    cache.flush()
    with inner.data.all() as it:
        assert sum(1 for _ in it) == 1000  # evicted dirty entries were written down first


def test_a_put_after_a_miss_charges_the_value(inner: CountingStore) -> None:
    """The README's read-then-write: a get miss caches the key as absent (small), the put
    that follows must charge the value, or the bound is exceeded many times over."""
    cache = cached(inner, size=100_000, batch=100_000, max_bytes=200_000)
    for i in range(2000):
        key = f"k{i:05d}"
        assert cache.get(key) is None
        cache.put(key, "v" * 1000)
    per_entry = ENTRY_OVERHEAD + estimate_size("k00000") + estimate_size("v" * 1000)
    assert cache.estimated_bytes <= 200_000
    assert cache.cached_count == 200_000 // per_entry
    cache.flush()
    with inner.data.all() as it:
        assert sum(1 for _ in it) == 2000


def test_byte_bound_follows_values_that_grow(inner: CountingStore) -> None:
    cache = cached(inner, size=10_000, batch=10_000, max_bytes=4_000_000)
    for i in range(500):
        cache.put(f"k{i:04d}", 1)
    assert cache.capacity == 10_000  # the entry bound rules for small entries
    # The same keys now hold big lists: a put over a value re-measures it one time in
    # RECHARGE_EVERY, so after that many rounds every key is charged its list.
    for _ in range(RECHARGE_EVERY + 1):
        for i in range(500):
            cache.put(f"k{i:04d}", list(range(200)))
    assert cache.estimated_entry_bytes > 1000
    assert cache.estimated_bytes <= 4_000_000
    assert cache.capacity < 4000
    assert cache.cached_count <= cache.capacity + 1


def test_a_shared_budget_divides_between_open_caches(inner: CountingStore) -> None:
    budget = CacheBudget(300_000)
    first, second = cached(inner, size=10_000), cached(CountingStore(), size=10_000)
    budget.register(first)
    assert first.max_bytes == 300_000
    for i in range(400):
        first.put(f"k{i:04d}", "x" * 1000)
    budget.register(second)
    assert first.max_bytes == second.max_bytes == 150_000
    first.get("one-more")  # over its new share: the next insert evicts down to it
    assert first.estimated_bytes <= 150_000
    second.close()
    assert budget.caches == 1 and first.max_bytes == 300_000


def test_a_reservation_takes_its_bytes_from_the_bound_and_the_budget_sees_it(
    inner: CountingStore,
) -> None:
    """reserve(n): memory beside the cache (a window operator's index of the store) comes out
    of the same bound: the entries keep within max_bytes - n (evicting at once), a new
    share keeps the reservation, and the shared budget counts it as the cache's."""
    budget = CacheBudget(400_000)
    cache = cached(inner, size=10_000, batch=10_000)
    budget.register(cache)
    for i in range(400):
        cache.put(f"k{i:04d}", "x" * 1000)
    assert 390_000 <= cache.estimated_bytes <= 400_000
    cache.reserve(300_000)
    assert cache.estimated_bytes <= 100_000  # evicted (dirty ones written down first)
    assert budget.used() == cache.estimated_bytes + 300_000
    assert budget.by_store() == {cache.name: budget.used()}
    second = cached(CountingStore(), size=10_000)
    budget.register(second)  # shares of 200,000: 200,000 - 300,000 leaves one entry's room
    cache.put("one-more", "x" * 1000)
    assert cache.cached_count == 1 and cache.reserved == 300_000
    second.close()
    cache.reserve(0)
    for i in range(400):
        cache.put(f"k{i:04d}", "x" * 1000)
    assert cache.estimated_bytes > 300_000
    cache.flush()
    with inner.data.all() as it:
        assert sum(1 for _ in it) == 401


def test_estimate_size_looks_two_levels_into_containers() -> None:
    import sys

    size = sys.getsizeof
    assert estimate_size(5) == size(5)
    record = {"user": "u-1", "count": 10**6}
    assert estimate_size(record) == size(record) + sum(
        size(x) for kv in record.items() for x in kv)
    big = list(range(1000, 2000))
    assert estimate_size(big) == size(big) + 1000 * size(1000)
    # a session window's value: the inner list's items count, the third level's do not
    state = [1, 2]
    sessions = [[1_700_000_000_000, 1_700_000_005_000, state]]
    inner = sessions[0]
    assert estimate_size(sessions) == size(sessions) + size(inner) + sum(map(size, inner))
    profile = {"tags": ["a", "bb"], "n": 1}
    assert estimate_size(profile) == size(profile) + size("tags") + size(profile["tags"]) \
        + size("a") + size("bb") + size("n") + size(1)


# -- shared objects ------------------------------------------------------------------------------


def test_mutate_then_put_is_written_at_the_next_flush(inner: CountingStore) -> None:
    cache = cached(inner)
    cache.put("cart", {"items": ["a"]})
    cache.flush()
    cart = cache.get("cart")
    cart["items"].append("b")  # in place ...
    cache.put("cart", cart)  # ... then put: dirty
    cart["items"].append("c")  # mutated again after the put, before the flush
    cache.flush()
    assert inner.data.get("cart") == {"items": ["a", "b", "c"]}  # what it holds at write-down


def test_mutate_without_put_is_seen_by_gets_but_never_written(inner: CountingStore) -> None:
    cache = cached(inner, size=2)
    cache.put("cart", {"items": ["a"]})
    cache.flush()
    cart = cache.get("cart")
    cart["items"].append("b")  # no put
    assert cache.get("cart") is cart and cart["items"] == ["a", "b"]  # same object, cached
    cache.flush()
    assert inner.calls["write_batch"] == 1  # not dirty: nothing written
    assert inner.data.get("cart") == {"items": ["a"]}
    cache.get("x")
    cache.get("y")  # "cart" is evicted (clean: dropped)
    assert cache.get("cart") == {"items": ["a"]}  # the mutation is lost


# -- null safety -------------------------------------------------------------------------------


def test_null_safe_layer_is_the_only_none_check(inner: CountingStore) -> None:
    store = NullSafeStore(cached(inner), "counts")
    for call, what in (
        (lambda: store.write_batch([("a", 1), (None, 2)]), "write_batch: key must not be None"),
        (lambda: store.put_all([("a", 1), (None, 2)]), "put_all: key must not be None"),
        (lambda: store.put("a", None), r"put: value must not be None \(use delete\(\)"),
    ):
        with pytest.raises(NoneEntryError, match=f"^store 'counts': {what}"):
            call()
    store.flush()
    assert inner.calls == Counter(flush=1)  # rejected calls wrote nothing
    # The cache and serialized layers no longer check: None reaches the serde and fails there.
    with pytest.raises(SerdeError, match="cannot serialize"):
        SerializedStore(InMemoryEngine(), StringSerde(), JsonSerde(), "s").put(None, 1)


# -- the logged layer ------------------------------------------------------------------------


class RecordingProducer:
    """Stands in for TrackedProducer in a unit test of the logged layer: records sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes, bytes | None]] = []

    def send(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.sent.append((topic, partition, key, value))


class WalRecordingEngine(InMemoryEngine):
    """An in-memory engine that remembers the disable_wal flag of every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.wal_flags: list[bool] = []
        self.flushes = 0

    def write_batch(
        self, items: Sequence[tuple[bytes, bytes | None]], disable_wal: bool = False
    ) -> None:
        self.wal_flags.append(disable_wal)
        super().write_batch(items, disable_wal)

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


def test_logged_stack_sends_one_record_per_key_per_commit_with_the_wal_off() -> None:
    producer = RecordingProducer()
    engine = WalRecordingEngine()
    dirtied: list[bool] = []
    stack = build_stack(
        "counts", engine, StringSerde(), JsonSerde(),
        logged=lambda e: LoggedStore(e, producer, "cl", 3, lambda: dirtied.append(True)),  # type: ignore[arg-type]
    )
    store, logged = stack.store, stack.logged
    assert logged is not None
    for user in ["a", "b", "a", "a", "c", "b"] * 50:
        store.put(user, (store.get(user) or 0) + 1)
    store.delete("c")
    assert producer.sent == [] and engine.wal_flags == [] and dirtied == []
    store.flush()  # the commit's flush
    # "c" was made and deleted between two write-downs: nothing below, not even a tombstone
    assert sorted(producer.sent) == [("cl", 3, b"a", b"150"), ("cl", 3, b"b", b"100")]
    assert engine.wal_flags == [True]  # one batch, no WAL
    assert dirtied == [True] and logged.dirty
    assert engine.flushes == 1 and not logged.unflushed  # the memtables were flushed
    logged.sync()
    assert engine.flushes == 1  # nothing written since: no second flush
    logged.mark_clean()
    store.put("a", 0)
    store.flush()
    assert dirtied == [True, True] and len(producer.sent) == 3


def test_engine_without_changelog_keeps_the_wal() -> None:
    engine = WalRecordingEngine()
    store = build_store("s", engine, StringSerde(), JsonSerde())
    store.put("a", 1)
    store.flush()
    assert engine.wal_flags == [False]


def test_logged_layer_counts_records_and_bytes_and_tracks_dirty_and_unflushed() -> None:
    """The counters behind millpond_store_changelog_* (records sent; key + value bytes, a
    tombstone its key's) and the flags a commit reads: clean and flushed until the first
    write, dirty until mark_clean, unflushed until flush; an empty batch changes nothing."""
    engine, producer, marked = WalRecordingEngine(), RecordingProducer(), []
    logged = LoggedStore(engine, producer, "cl", 3,  # type: ignore[arg-type]
                         on_dirty=lambda: marked.append(1))
    assert (logged.writes, logged.bytes, logged.dirty, logged.unflushed) == (0, 0, False, False)
    logged.write_batch([])
    assert (logged.writes, logged.dirty, logged.unflushed, producer.sent) == (0, False, False, [])
    logged.write_batch([(b"ab", b"xyz"), (b"c", None)])
    logged.put(b"d", b"ee")
    assert (logged.writes, logged.bytes) == (3, (2 + 3) + 1 + (1 + 2))
    assert (logged.dirty, logged.unflushed, marked) == (True, True, [1])  # on_dirty once
    logged.sync()
    assert (logged.unflushed, engine.flushes, logged.dirty) == (False, 1, True)
    logged.sync()  # nothing written since: no second flush
    assert engine.flushes == 1
    logged.mark_clean()
    assert logged.dirty is False and (logged.writes, logged.bytes) == (3, 9)  # counters go on

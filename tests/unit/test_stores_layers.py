"""Store layers: serialized and cached stacks over both engines, and the cache's write-back."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

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
    RocksDbEngine,
    RocksDbOptions,
    SerializedStore,
    StoreClosedError,
    StoreConfigError,
    StoreError,
    build_store,
)
from millpond.stores.api import BytesStore

MiB = 1024 * 1024
SMALL = RocksDbOptions(block_cache_size_bytes=8 * MiB, write_buffer_size_bytes=4 * MiB)


def make_engine(kind: str, tmp_path: Path) -> BytesStore:
    if kind == "rocksdb":
        return RocksDbEngine(tmp_path / "db", SMALL)
    return InMemoryEngine()


# (engine, cache_size, write_batch_size): no cache, a tiny cache that evicts constantly, a big one
STACKS = [
    (engine, cache, batch)
    for engine in ("rocksdb", "memory")
    for cache, batch in ((0, 500), (3, 2), (1000, 500))
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
    store, engine = open_store(layout, tmp_path)
    with pytest.raises(SerdeError, match="store 'counts': serde 'string': cannot serialize int"):
        store.put(5, "v")
    with pytest.raises(SerdeError, match="store 'counts': serde 'json': cannot serialize"):
        store.put("k", {1, 2})
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


def test_build_store_with_config_serdes(tmp_path: Path) -> None:
    key = build_serde(
        SerdeSpec("ids", "org.apache.samza.serializers.LongSerdeFactory", {}, "job.properties:3")
    )
    msg = build_serde(SerdeSpec("json", "json", {}, "job.properties:4"))
    store = build_store("s", RocksDbEngine(tmp_path / "db", SMALL), key, msg)
    assert isinstance(store, SerializedStore)
    assert isinstance(store.inner, CachedStore)
    store.put(-7, {"x": 1})
    assert store.get(-7) == {"x": 1}
    store.close()
    plain = build_store("p", InMemoryEngine(), key, msg, cache_size=0)
    assert isinstance(plain, SerializedStore) and isinstance(plain.inner, InMemoryEngine)


# -- the cache's write-back, against a counting fake -------------------------------------------


class CountingStore:
    """A BytesStore that records every call and keeps its data in an in-memory engine."""

    def __init__(self) -> None:
        self.data = InMemoryEngine()
        self.calls: Counter[str] = Counter()
        self.batches: list[list[tuple[bytes, bytes | None]]] = []

    def get(self, key: bytes) -> bytes | None:
        self.calls["get"] += 1
        return self.data.get(key)

    def get_all(self, keys: Iterable[bytes]) -> dict[bytes, bytes]:
        self.calls["get_all"] += 1
        return self.data.get_all(keys)

    def put(self, key: bytes, value: bytes) -> None:
        self.calls["put"] += 1
        self.data.put(key, value)

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        self.calls["put_all"] += 1
        self.data.put_all(items)

    def delete(self, key: bytes) -> None:
        self.calls["delete"] += 1
        self.data.delete(key)

    def delete_all(self, keys: Iterable[bytes]) -> None:
        self.calls["delete_all"] += 1
        self.data.delete_all(keys)

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        self.calls["write_batch"] += 1
        self.batches.append(list(items))
        self.data.write_batch(items)

    def range(self, start: bytes, end: bytes) -> KeyValueIterator[bytes, bytes]:
        self.calls["range"] += 1
        return self.data.range(start, end)

    def prefix(self, prefix: bytes) -> KeyValueIterator[bytes, bytes]:
        self.calls["prefix"] += 1
        return self.data.prefix(prefix)

    def all(self) -> KeyValueIterator[bytes, bytes]:
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


def test_repeated_puts_of_one_key_reach_the_inner_store_once(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=100, write_batch_size=50)
    for i in range(10):
        cache.put(b"k", b"v%d" % i)
    assert cache.get(b"k") == b"v9"
    assert inner.calls == Counter()  # nothing went down yet, not even a get
    cache.flush()
    assert inner.batches == [[(b"k", b"v9")]]
    assert inner.calls == Counter(write_batch=1, flush=1)
    cache.flush()  # nothing dirty: no second batch
    assert inner.calls["write_batch"] == 1


def test_dirty_count_reaching_write_batch_size_writes_one_batch(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=100, write_batch_size=3)
    cache.put(b"a", b"1")
    cache.delete(b"b")
    assert inner.batches == []
    cache.put(b"c", b"3")
    assert inner.batches == [[(b"a", b"1"), (b"b", None), (b"c", b"3")]]
    assert cache.dirty_count == 0
    assert inner.calls["flush"] == 0  # a write-down is not a flush


def test_evicting_a_dirty_entry_writes_all_dirty_entries(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=2, write_batch_size=100)
    cache.put(b"a", b"1")
    cache.put(b"b", b"2")
    assert inner.batches == []
    cache.put(b"c", b"3")  # evicts a (dirty): a, b and c go down in one batch
    assert len(inner.batches) == 1
    assert sorted(inner.batches[0]) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert cache.dirty_count == 0
    assert cache.get(b"a") == b"1"  # no longer cached: read from below
    assert inner.calls["get"] == 1


def test_evicting_clean_entries_writes_nothing(inner: CountingStore) -> None:
    inner.data.put_all([(b"x%d" % i, b"v") for i in range(5)])
    cache = CachedStore(inner, cache_size=2, write_batch_size=100)
    for i in range(5):
        assert cache.get(b"x%d" % i) == b"v"
    assert inner.calls == Counter(get=5)


def test_gets_of_deleted_and_missing_keys_stay_in_the_cache(inner: CountingStore) -> None:
    inner.data.put(b"k", b"old")
    cache = CachedStore(inner, cache_size=10, write_batch_size=10)
    cache.delete(b"k")
    assert cache.get(b"k") is None
    assert cache.get(b"k") is None
    assert inner.calls["get"] == 0  # the cached delete answered
    assert cache.get(b"nope") is None
    assert cache.get(b"nope") is None
    assert inner.calls["get"] == 1  # the miss is cached as well
    cache.flush()
    assert inner.batches == [[(b"k", None)]]
    assert inner.data.get(b"k") is None


def test_get_refreshes_recency(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=2, write_batch_size=100)
    cache.put(b"a", b"1")
    cache.put(b"b", b"2")
    cache.flush()
    cache.get(b"a")  # a is now most recent, b is the LRU entry
    cache.put(b"c", b"3")  # evicts b (clean): no write
    assert inner.calls["write_batch"] == 1
    calls_before = inner.calls["get"]
    assert cache.get(b"a") == b"1"
    assert inner.calls["get"] == calls_before
    assert cache.get(b"b") == b"2"
    assert inner.calls["get"] == calls_before + 1


def test_get_all_uses_the_cache_and_one_inner_call(inner: CountingStore) -> None:
    inner.data.put_all([(b"a", b"1"), (b"b", b"2")])
    cache = CachedStore(inner, cache_size=10, write_batch_size=10)
    cache.put(b"c", b"3")
    cache.delete(b"a")
    assert cache.get_all([b"a", b"b", b"c", b"d"]) == {b"b": b"2", b"c": b"3"}
    assert inner.calls == Counter(get_all=1)
    assert cache.get_all([b"b", b"d"]) == {b"b": b"2"}
    assert inner.calls == Counter(get_all=1)


def test_scans_write_dirty_entries_down_first(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=10, write_batch_size=10)
    cache.put(b"b", b"2")
    cache.put(b"a", b"1")
    with cache.all() as it:
        assert list(it) == [(b"a", b"1"), (b"b", b"2")]
    assert inner.calls["write_batch"] == 1
    cache.put(b"ab", b"3")
    assert [k for k, _ in cache.prefix(b"a")] == [b"a", b"ab"]
    cache.delete(b"a")
    assert [k for k, _ in cache.range(b"a", b"b")] == [b"ab"]
    assert inner.calls["write_batch"] == 3


def test_write_batch_into_the_cache_marks_entries_dirty(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=10, write_batch_size=10)
    cache.write_batch([(b"a", b"1"), (b"b", None)])
    cache.put_all([(b"c", b"3")])
    cache.delete_all([b"c"])
    assert inner.calls == Counter()
    cache.flush()
    assert inner.batches == [[(b"a", b"1"), (b"b", None), (b"c", None)]]


def test_zero_cache_size_passes_straight_through(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=0)
    cache.put(b"a", b"1")
    cache.put(b"a", b"2")
    assert inner.calls == Counter(put=2)
    assert cache.get(b"a") == b"2"
    cache.delete(b"a")
    cache.get(b"a")
    assert inner.calls == Counter(put=2, get=2, delete=1)


def test_close_flushes_then_closes_and_refuses_writes(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=10, write_batch_size=10)
    cache.put(b"a", b"1")
    cache.close()
    assert inner.batches == [[(b"a", b"1")]]
    assert inner.calls["flush"] == 1 and inner.calls["close"] == 1
    cache.close()
    assert inner.calls["close"] == 1
    with pytest.raises(StoreClosedError):
        cache.put(b"b", b"2")
    with pytest.raises(StoreClosedError):
        cache.delete(b"b")


def test_cached_store_rejects_none_and_non_bytes(inner: CountingStore) -> None:
    cache = CachedStore(inner)
    with pytest.raises(NoneEntryError, match="use delete"):
        cache.put(b"k", None)  # type: ignore[arg-type]
    with pytest.raises(NoneEntryError):
        cache.delete(None)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="must be bytes, got str"):
        cache.put("k", b"v")  # type: ignore[arg-type]
    assert cache.dirty_count == 0


@pytest.mark.parametrize(("size", "batch"), [(-1, 10), (10, 0)])
def test_cached_store_rejects_bad_sizes(inner: CountingStore, size: int, batch: int) -> None:
    with pytest.raises(StoreConfigError):
        CachedStore(inner, cache_size=size, write_batch_size=batch)


def test_cache_stays_bounded(inner: CountingStore) -> None:
    cache = CachedStore(inner, cache_size=5, write_batch_size=3)
    for i in range(100):
        cache.put(b"%03d" % i, b"v")
        cache.get(b"%03d" % (i // 2))
        assert len(cache._cache) <= 5
    cache.flush()
    assert [k for k, _ in inner.data.all()] == [b"%03d" % i for i in range(100)]
    assert all(len(batch) <= 3 for batch in inner.batches)

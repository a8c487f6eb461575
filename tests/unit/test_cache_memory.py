"""The object cache's byte bound measured: the README's read-then-write pattern over a real
RocksDB store with ~1 KB JSON values keeps the cache's real memory (tracemalloc: every Python
allocation the cache holds; RocksDB's own memory is C++ and not traced) within 10% of
object.cache.max.bytes."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

from millpond.serdes import JsonSerde, StringSerde
from millpond.stores import RocksDbEngine, RocksDbOptions, build_stack

MAX_BYTES = 4 * 1024 * 1024


def test_read_then_write_with_1kb_values_stays_within_10_percent_of_the_bound(
    tmp_path: Path,
) -> None:
    engine = RocksDbEngine(tmp_path / "store", RocksDbOptions(block_cache_size_bytes=8 << 20))
    stack = build_stack("docs", engine, StringSerde(), JsonSerde(), 1_000_000, 50_000,
                        cache_max_bytes=MAX_BYTES)
    store, cache = stack.store, stack.cache
    assert cache is not None
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for rnd in range(2):  # the second round reads the values back from RocksDB
            for i in range(12_000):  # ~3x what the bound holds
                key = f"user-{i:06d}"
                doc = store.get(key) or {"n": 0}
                store.put(key, {"n": doc["n"] + 1, "body": f"{key}:{rnd}:" + "x" * 1000})
            store.flush()  # what stays is the cache alone (the write-down's copies are gone)
            gc.collect()
            used = tracemalloc.get_traced_memory()[0] - base
            print(f"round {rnd}: measured {used} B for a bound of {MAX_BYTES} B")
            assert 0.9 * MAX_BYTES <= used <= 1.1 * MAX_BYTES, (rnd, used, cache)
            assert cache.estimated_bytes <= MAX_BYTES
    finally:
        tracemalloc.stop()
    assert store.get("user-000000") == {"n": 2, "body": "user-000000:1:" + "x" * 1000}
    store.close()


def test_a_count_store_entry_is_charged_about_240_bytes_and_uses_about_200(
    tmp_path: Path,
) -> None:
    """docs/concepts/stores.md: a count store (short string key, int value) is charged ~240 B
    per entry (~200 B measured): the cache's average charge and its real memory per entry
    (tracemalloc), for 20,000 users counted over a real RocksDB store."""
    engine = RocksDbEngine(tmp_path / "store", RocksDbOptions(block_cache_size_bytes=8 << 20))
    stack = build_stack("counts", engine, StringSerde(), JsonSerde(), 100_000, 50_000,
                        cache_max_bytes=64 << 20)
    store, cache = stack.store, stack.cache
    assert cache is not None
    users = 20_000
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(3):
            for i in range(users):
                key = f"user-{i}"
                store.put(key, (store.get(key) or 1000 * i) + 1)  # ints past the small-int cache
            store.flush()
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert cache.cached_count == users
    charged = cache.estimated_entry_bytes
    measured = used / users
    print(f"charged {charged} B, measured {measured:.0f} B per entry")
    assert 210 <= charged <= 270, charged
    assert 170 <= measured <= 240, measured
    assert measured <= charged  # the bound errs on the safe side
    store.close()

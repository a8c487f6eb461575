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

"""The object cache's admission of values read from below: a full cache that rarely hits (a
table read at random, larger than the cache) caches one value in ADMIT_ONE_IN of those its
misses find, so most misses skip sizing, charging and evicting; a key read often still gets
in, and a workload that hits again is admitted in full. Every read answers what is below.

Over a real serialized layer and an in-memory engine with a counting get."""

from __future__ import annotations

import random

from millpond.serdes import JsonSerde, StringSerde
from millpond.stores import CachedStore, SerializedStore
from millpond.stores.cached import ADMIT_ONE_IN, REVIEW_EVERY
from millpond.stores.engines.memory import InMemoryEngine


class Counting(InMemoryEngine):
    """An in-memory engine that counts its gets."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def get(self, key: bytes) -> bytes | None:
        self.gets += 1
        return super().get(key)


def table(rows: int, size: int) -> tuple[Counting, CachedStore[str, dict[str, int]]]:
    engine = Counting()
    for i in range(rows):
        engine.put(f"u{i}".encode(), f'{{"zip": {i}}}'.encode())
    cache = CachedStore(SerializedStore(engine, StringSerde(), JsonSerde(), "t"), "t", size)
    return engine, cache


def sparse_table(seed: int) -> tuple[Counting, CachedStore[str, dict[str, int]]]:
    """A 20k-row table behind a 1k-entry cache, read at random until the cache is sparse."""
    engine, cache = table(20_000, 1_000)
    rng = random.Random(seed)
    for _ in range(2 * REVIEW_EVERY):
        cache.get(f"u{rng.randrange(20_000)}")
    assert cache._sparse
    return engine, cache


def test_random_reads_of_a_table_larger_than_the_cache_admit_one_value_in_n() -> None:
    engine, cache = table(20_000, 1_000)
    rng = random.Random(7)
    reads = 6 * REVIEW_EVERY
    for _ in range(reads):
        i = rng.randrange(20_000)
        assert cache.get(f"u{i}") == {"zip": i}
    # the first review found the cache full and hitting ~5%: sparse from then on
    assert cache._sparse
    sparse_misses = cache.misses - REVIEW_EVERY
    assert cache.not_admitted > sparse_misses * (ADMIT_ONE_IN - 2) // ADMIT_ONE_IN
    assert cache.evictions < REVIEW_EVERY + sparse_misses // 8  # the misses evicted little
    assert engine.gets == cache.misses
    assert cache.cached_count <= 1_000


def test_a_hot_key_still_gets_in_and_hits_once_admitted() -> None:
    engine, cache = sparse_table(3)
    for _ in range(2 * ADMIT_ONE_IN):
        assert cache.get("u42") == {"zip": 42}
    before = engine.gets
    for _ in range(100):
        assert cache.get("u42") == {"zip": 42}
    assert engine.gets == before  # cached: every read a hit


def test_a_workload_that_hits_again_is_admitted_in_full() -> None:
    engine, cache = sparse_table(5)
    # now 500 keys, read over and over: the admitted ones hit, the ratio rises past 1 in 8
    hot = [f"u{i}" for i in range(500)]
    for _ in range(40):
        for key in hot:
            cache.get(key)
        if not cache._sparse:
            break
    assert not cache._sparse
    missed = cache.misses
    for key in hot:  # admitted in full now: at most one more miss each, then hits
        cache.get(key)
    for key in hot:
        cache.get(key)
    assert cache.misses - missed <= len(hot)


def test_misses_that_find_nothing_are_always_cached() -> None:
    """A window's first get finds nothing; caching that absence is what lets a put then
    delete of the key between write-downs reach nothing below (freshness)."""
    engine, cache = sparse_table(9)
    assert cache.get("absent") is None
    gets = engine.gets
    assert cache.get("absent") is None
    assert engine.gets == gets
    cache.put("absent", {"zip": 1})
    cache.delete("absent")
    cache.flush()
    assert engine.get(b"absent") is None


def test_get_all_admits_as_get_does() -> None:
    engine, cache = sparse_table(11)
    keys = [f"u{i}" for i in range(5_000, 5_000 + 8 * ADMIT_ONE_IN)]
    got = cache.get_all(keys + ["nope"])
    assert got == {k: {"zip": int(k[1:])} for k in keys}
    assert cache.not_admitted >= 8 * (ADMIT_ONE_IN - 1) - 1

"""What the object cache leaves out of the layers below: a key made and deleted between two
write-downs (no engine write, no changelog record, not even a tombstone), a delete once
written down (the entry is forgotten), and a range scan's write-down when the key serde
sorts as its objects (the dirty entries are laid over the scan instead).

Over a real serialized layer and in-memory engine, so scans are ordered by serialized
bytes as in the job; a recording engine counts what reaches it."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from millpond.serdes import (
    BytesSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    Serde,
    StringSerde,
)
from millpond.serdes.builtins import DoubleSerde, SamzaIntegerSerde, UUIDSerde
from millpond.stores import CachedStore, SerializedStore
from millpond.stores.cached import MERGE_MIN, MERGES_PER_WRITE_DOWN
from millpond.stores.engines.memory import InMemoryEngine
from millpond.stores.undo import RecordJournal


class Recording(InMemoryEngine):
    """An in-memory engine that keeps every batch written to it and counts its gets."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[tuple[bytes, bytes | None]]] = []
        self.gets = 0

    def get(self, key: bytes) -> bytes | None:
        self.gets += 1
        return super().get(key)

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]],
                    disable_wal: bool = False) -> None:
        self.batches.append(list(items))
        super().write_batch(items, disable_wal)

    @property
    def written(self) -> list[tuple[bytes, bytes | None]]:
        return [item for batch in self.batches for item in batch]


def stack(engine: Recording, key_serde: Serde[Any] | None = None, *, merge: bool = True,
          size: int = 10_000, batch: int = 5_000) -> CachedStore[Any, Any]:
    serde = key_serde or StringSerde()
    return CachedStore(SerializedStore(engine, serde, JsonSerde(), "s"), "s", size, batch,
                       merge_scans=merge and serde.sorts_as_objects)


def test_a_key_made_and_deleted_between_write_downs_writes_nothing_below() -> None:
    engine = Recording()
    cache = stack(engine)
    assert cache.get("w1") is None  # the layer below has no w1: a put now makes it fresh
    cache.put("w1", 1)
    cache.put("w1", 2)
    cache.delete("w1")
    cache.flush()
    assert engine.written == []  # no put, no tombstone
    assert cache.get("w1") is None and cache.dirty_count == 0


def test_a_delete_is_written_when_the_layer_below_may_hold_the_key() -> None:
    engine = Recording()
    engine.put(b"old", b"1")
    cache = stack(engine)
    cache.get("old")  # found below
    cache.put("old", 5)
    cache.delete("old")
    cache.put("blind", 1)  # never looked up: the layer below may have it
    cache.delete("blind")
    assert cache.get("gone") is None
    cache.put("gone", 1)
    cache.flush()  # written down: no longer fresh
    cache.delete("gone")
    cache.flush()
    assert sorted(engine.written, key=repr) == [(b"blind", None), (b"gone", None),
                                                (b"gone", b"1"), (b"old", None)]
    assert engine.get(b"old") is None and engine.get(b"gone") is None


def test_a_delete_after_a_delete_was_written_down_makes_the_key_fresh_again() -> None:
    engine = Recording()
    engine.put(b"k", b"1")
    cache = stack(engine)
    cache.delete("k")
    cache.flush()  # the tombstone goes down; the cache forgets the entry
    assert engine.written == [(b"k", None)] and cache.cached_count == 0
    assert cache.get("k") is None  # asks below, finds nothing: known absent
    cache.put("k", 2)
    cache.delete("k")
    cache.flush()
    assert engine.written == [(b"k", None)]


def test_an_undone_record_leaves_a_fresh_key_as_it_found_it() -> None:
    """A skipped record's writes are undone (the cached miss of its new key forgotten with
    them); the next get asks below again, and a put and delete after it write nothing."""
    engine = Recording()
    engine.put(b"k", b"9")
    cache = stack(engine)
    journal = RecordJournal()
    journal.attach(cache)
    assert cache.get("n") is None
    entries = journal.start()
    cache.put("n", 1)  # fresh
    cache.put("k", 1)
    journal.undo()  # the record was skipped
    assert entries == [] and cache.get("n") is None and cache.get("k") == 9
    journal.stop()
    cache.put("n", 2)
    cache.delete("n")
    cache.flush()
    assert engine.written == []
    assert engine.get(b"k") == b"9"


def test_put_new_is_fresh_without_a_lookup_below() -> None:
    """A key the caller knows holds no value (a window the operator never opened): no get
    below, and put + delete between write-downs write nothing, as after a get's miss."""
    engine = Recording()
    cache = stack(engine)
    cache.put_new("w1", 1)
    cache.put("w1", 2)
    assert cache.get("w1") == 2 and engine.gets == 0
    cache.delete("w1")
    cache.put_new("w2", 3)
    cache.flush()
    assert engine.written == [(b"w2", b"3")] and engine.gets == 0
    assert cache.hits == 1 and cache.misses == 0


def test_put_new_over_a_pending_delete_still_deletes_below() -> None:
    """A cached key is an ordinary put: a dirty delete of a value below stays owed (marking
    it fresh would drop the tombstone and let the old value back)."""
    engine = Recording()
    engine.put(b"k", b"1")
    cache = stack(engine)
    cache.delete("k")  # dirty: the layer below still holds 1
    cache.put_new("k", 2)
    cache.delete("k")
    cache.flush()
    assert engine.written == [(b"k", None)] and engine.get(b"k") is None


def test_put_new_of_a_skipped_record_is_forgotten() -> None:
    engine = Recording()
    cache = stack(engine)
    journal = RecordJournal()
    journal.attach(cache)
    journal.start()
    cache.put_new("n", 1)
    journal.undo()
    journal.stop()
    assert cache.cached_count == 0 and cache.dirty_count == 0
    assert cache.get("n") is None and engine.gets == 1
    cache.flush()
    assert engine.written == []


def test_put_new_through_the_null_safe_layer_and_a_plain_store() -> None:
    from millpond.stores import NullSafeStore
    from millpond.stores.errors import StoreError
    engine = Recording()
    top = NullSafeStore(stack(engine), "s")
    top.put_new("a", 1)
    with pytest.raises(StoreError, match="put_new"):
        top.put_new("b", None)
    plain = SerializedStore(engine, StringSerde(), JsonSerde(), "s")  # no cache: a put
    plain.put_new("c", 2)
    top.flush()
    assert engine.get(b"a") == b"1" and engine.get(b"c") == b"2" and engine.gets == 2


def _fill(cache: CachedStore[Any, Any], engine: Recording, n: int) -> None:
    for i in range(n):
        cache.put(f"k{i:04d}", i)
    cache.flush()
    engine.batches.clear()


def test_a_range_scan_lays_the_dirty_entries_over_the_layer_below_without_writing() -> None:
    engine = Recording()
    cache = stack(engine)
    _fill(cache, engine, 100)  # k0000..k0099 below
    for i in range(0, 100, 2):
        cache.put(f"k{i:04d}", -i)  # replaced
    for i in range(1, 100, 10):
        cache.delete(f"k{i:04d}")  # hidden
    for i in range(100, 140):
        cache.put(f"k{i:04d}", i)  # new, after the layer below's last key
    cache.put("a", "first")  # out of range
    assert cache.dirty_count > MERGE_MIN
    with cache.range("k0000", "k0120") as it:
        got = list(it)
    want = [(f"k{i:04d}", -i if i % 2 == 0 and i < 100 else i) for i in range(120)
            if i % 10 != 1 or i >= 100]
    assert got == want
    assert engine.batches == []  # nothing written down for the scan
    cache.flush()
    with cache.range("k0000", "k0120") as it:
        assert list(it) == want  # the same after the write-down


def test_merged_scans_match_a_dict_under_random_writes() -> None:
    rng = random.Random(7)
    engine = Recording()
    cache = stack(engine)
    model: dict[str, int] = {}
    merged = 0
    keys = [f"{rng.randrange(10**6):07d}|{rng.choice('xyz')}" for _ in range(400)]
    for step in range(30_000):
        key = rng.choice(keys)
        roll = rng.random()
        if roll < 0.5:
            cache.put(key, step)
            model[key] = step
        elif roll < 0.75:
            cache.delete(key)
            model.pop(key, None)
        elif roll < 0.97:
            assert cache.get(key) == model.get(key)
        elif roll < 0.975:
            a, b = sorted(rng.sample(keys, 2))
            merged += cache.dirty_count > MERGE_MIN
            with cache.range(a, b) as it:
                assert list(it) == sorted((k, v) for k, v in model.items() if a <= k < b)
        elif roll < 0.9755:
            cache.flush()
    cache.flush()
    assert merged > 100  # scans with enough dirty entries to merge
    assert dict(cache.range("", "~")) == model
    with engine.all() as it:
        assert {k.decode(): v for k, v in it} == {k: str(v).encode() for k, v in model.items()}


def test_scans_write_down_after_enough_merges_and_when_few_are_dirty() -> None:
    engine = Recording()
    cache = stack(engine)
    _fill(cache, engine, 10)
    for i in range(MERGE_MIN):  # not more than MERGE_MIN dirty: written down
        cache.put(f"n{i:04d}", i)
    list(cache.range("k", "l"))
    assert len(engine.batches) == 1 and cache.dirty_count == 0
    for i in range(MERGE_MIN + 1):
        cache.put(f"m{i:04d}", i)
    for _ in range(MERGES_PER_WRITE_DOWN):
        list(cache.range("k", "l"))
    assert len(engine.batches) == 1  # merged
    list(cache.range("k", "l"))
    assert len(engine.batches) == 2 and cache.dirty_count == 0  # the budget was spent


def test_a_key_serde_that_does_not_sort_as_its_objects_writes_down_before_a_scan() -> None:
    engine = Recording()
    cache = stack(engine, JsonSerde())
    assert not cache.merge_scans
    for i in range(MERGE_MIN * 2):
        cache.put(i, i)  # JSON: 10 sorts before 9 as bytes, after it as ints
    assert [k for k, _ in cache.range(0, 1000)][:3] == [0, 1, 10]
    assert engine.written  # the scan read what was written down


@pytest.mark.parametrize("serde,samples", [
    (StringSerde(), ["", "a", "b", "ab", "é", "z", "\u00ff", "\u0100", "\uffff", "\U0001f600"]),
    (BytesSerde(), [b"", b"\x00", b"\x7f", b"\x80", b"\xff", b"a", b"ab"]),
    (IntegerSerde(), [-2**31, -5, -1, 0, 1, 7, 255, 256, 2**31 - 1]),
    (LongSerde(), [-2**63, -2**40, -1, 0, 1, 2**40, 2**63 - 1]),
])
def test_serdes_that_say_they_sort_as_their_objects_do(serde: Serde[Any],
                                                       samples: list[Any]) -> None:
    assert serde.sorts_as_objects
    assert sorted(samples) == sorted(samples, key=serde.to_bytes)


@pytest.mark.parametrize("serde", [StringSerde(encoding="utf-16"), JsonSerde(), DoubleSerde(),
                                   SamzaIntegerSerde(), UUIDSerde()])
def test_serdes_that_do_not_sort_as_their_objects_say_so(serde: Serde[Any]) -> None:
    assert not serde.sorts_as_objects
    # e.g. two's complement: -1 sorts after 1 as bytes; a UUID serde also takes str keys
    assert SamzaIntegerSerde().to_bytes(-1) > SamzaIntegerSerde().to_bytes(1)

"""Storage engines: every BytesStore method on RocksDB and in-memory, plus RocksDB specifics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from millpond.stores import (
    InMemoryEngine,
    NoneEntryError,
    RocksDbEngine,
    RocksDbOptions,
    StoreClosedError,
    StoreConfigError,
    StoreError,
)
from millpond.stores.api import BytesStore, StorageEngine

MiB = 1024 * 1024
SMALL = RocksDbOptions(block_cache_size_bytes=8 * MiB, write_buffer_size_bytes=4 * MiB)

# Deliberately awkward keys: shared prefixes, 0x00 and 0xff bytes, the empty key.
KEYS = [
    b"",
    b"\x00",
    b"a",
    b"a\x00",
    b"ab",
    b"abc",
    b"a\xff",
    b"a\xff\xff",
    b"b",
    b"\xff",
    b"\xff\xff",
]


@pytest.fixture(params=["rocksdb", "memory"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BytesStore]:
    store: BytesStore
    if request.param == "rocksdb":
        store = RocksDbEngine(tmp_path / "db", SMALL)
    else:
        store = InMemoryEngine()
    yield store
    store.close()


def fill(store: BytesStore) -> None:
    store.put_all([(k, b"v" + k) for k in reversed(KEYS)])


def pairs(it: Iterator[tuple[bytes, bytes]]) -> list[bytes]:
    with it as scan:  # type: ignore[attr-defined]
        return [k for k, _ in scan]


# -- point operations --------------------------------------------------------------------------


def test_put_get_delete(engine: BytesStore) -> None:
    assert engine.get(b"k") is None
    engine.put(b"k", b"v1")
    assert engine.get(b"k") == b"v1"
    engine.put(b"k", b"v2")
    assert engine.get(b"k") == b"v2"
    engine.delete(b"k")
    assert engine.get(b"k") is None
    engine.delete(b"never-there")  # no error
    engine.put(b"", b"")  # empty key and value are legal
    assert engine.get(b"") == b""


def test_get_all_leaves_out_absent_keys(engine: BytesStore) -> None:
    engine.put_all([(b"a", b"1"), (b"b", b"2")])
    assert engine.get_all([b"a", b"zz", b"b"]) == {b"a": b"1", b"b": b"2"}
    assert engine.get_all([]) == {}


def test_put_all_later_pair_wins_and_delete_all(engine: BytesStore) -> None:
    engine.put_all([(b"a", b"1"), (b"b", b"2"), (b"a", b"3")])
    assert engine.get(b"a") == b"3"
    engine.delete_all([b"a", b"missing"])
    assert engine.get(b"a") is None
    assert engine.get(b"b") == b"2"


@pytest.mark.parametrize("disable_wal", [False, True])
def test_write_batch_applies_puts_and_deletes_in_order(
    engine: BytesStore, disable_wal: bool
) -> None:
    engine.put(b"gone", b"x")
    engine.write_batch(  # type: ignore[call-arg]
        [(b"a", b"1"), (b"gone", None), (b"b", b"2"), (b"a", None), (b"a", b"4")],
        disable_wal=disable_wal,
    )
    assert engine.get_all([b"a", b"b", b"gone"]) == {b"a": b"4", b"b": b"2"}
    engine.write_batch([])


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.put(None, b"v"),
        lambda s: s.put(b"k", None),
        lambda s: s.get(None),
        lambda s: s.delete(None),
        lambda s: s.put_all([(b"k", None)]),
        lambda s: s.delete_all([b"a", None]),
        lambda s: s.write_batch([(b"a", b"1"), (None, b"v")]),
        lambda s: s.range(None, b"z"),
        lambda s: s.prefix(None),
    ],
)
def test_none_keys_and_values_are_rejected(engine: BytesStore, call: object) -> None:
    # Engines reject None as a non-bytes value; the null-safe layer on top of a store stack
    # is where None gets its own NoneEntryError (tests/unit/test_stores_layers.py).
    with pytest.raises(StoreError, match="must be bytes, got NoneType") as info:
        call(engine)  # type: ignore[operator]
    assert not isinstance(info.value, NoneEntryError)
    assert engine.get(b"k") is None and engine.get(b"a") is None  # nothing was written


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.put("text", b"v"),
        lambda s: s.put(b"k", "text"),
        lambda s: s.get(1),
        lambda s: s.write_batch([("k", b"v")]),
        lambda s: s.write_batch([(b"k", 5)]),
    ],
)
def test_non_bytes_are_rejected(engine: BytesStore, call: object) -> None:
    with pytest.raises(StoreError, match="must be bytes"):
        call(engine)  # type: ignore[operator]
    assert engine.get(b"k") is None  # a rejected batch writes nothing


def test_malformed_batch_items_are_rejected(engine: BytesStore) -> None:
    with pytest.raises(StoreError, match=r"items must be \(key, value\) pairs, got bytes"):
        engine.write_batch([(b"a", b"1"), b"oops"])  # type: ignore[list-item]
    assert engine.get(b"a") is None


# -- scans -------------------------------------------------------------------------------------


def test_all_is_in_unsigned_byte_order(engine: BytesStore) -> None:
    fill(engine)
    with engine.all() as it:
        items = list(it)
    assert [k for k, _ in items] == sorted(KEYS)
    assert all(v == b"v" + k for k, v in items)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (b"a", b"b", [b"a", b"a\x00", b"ab", b"abc", b"a\xff", b"a\xff\xff"]),
        (b"a\x00", b"abc", [b"a\x00", b"ab"]),
        (b"", b"\x00", [b""]),
        (b"b", b"\xff\xff\xff", [b"b", b"\xff", b"\xff\xff"]),
        (b"abd", b"a\xff", []),
        (b"b", b"a", []),  # start >= end: empty
        (b"b", b"b", []),
    ],
)
def test_range_start_inclusive_end_exclusive(
    engine: BytesStore, start: bytes, end: bytes, expected: list[bytes]
) -> None:
    fill(engine)
    assert pairs(engine.range(start, end)) == expected


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (b"a", [b"a", b"a\x00", b"ab", b"abc", b"a\xff", b"a\xff\xff"]),
        (b"ab", [b"ab", b"abc"]),
        (b"a\xff", [b"a\xff", b"a\xff\xff"]),
        (b"\xff", [b"\xff", b"\xff\xff"]),
        (b"c", []),
        (b"", sorted(KEYS)),
    ],
)
def test_prefix(engine: BytesStore, prefix: bytes, expected: list[bytes]) -> None:
    fill(engine)
    assert pairs(engine.prefix(prefix)) == expected


def test_scans_of_an_empty_store(engine: BytesStore) -> None:
    assert pairs(engine.all()) == []
    assert pairs(engine.range(b"a", b"z")) == []
    assert pairs(engine.prefix(b"a")) == []


def test_iterator_is_a_point_in_time_view(engine: BytesStore) -> None:
    engine.put_all([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    it = engine.all()
    engine.put(b"b", b"changed")
    engine.delete(b"c")
    engine.put(b"d", b"4")
    assert list(it) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def test_scans_see_deletes_and_re_puts(engine: BytesStore) -> None:
    fill(engine)
    engine.delete(b"ab")
    engine.delete(b"b")
    engine.put(b"b", b"again")
    engine.put(b"new", b"n")
    assert pairs(engine.prefix(b"a"))[:4] == [b"a", b"a\x00", b"abc", b"a\xff"]
    assert dict(engine.all())[b"b"] == b"again"
    assert b"new" in pairs(engine.all())


def test_iterator_close_and_exhaustion(engine: BytesStore) -> None:
    fill(engine)
    with engine.all() as it:
        assert next(it) == (b"", b"v")
    with pytest.raises(StoreClosedError, match="after close"):
        next(it)
    it.close()  # idempotent

    done = engine.prefix(b"ab")
    assert len(list(done)) == 2
    with pytest.raises(StopIteration):
        next(done)  # exhausted (not closed) keeps raising StopIteration


def test_closing_the_store_closes_open_iterators(engine: BytesStore) -> None:
    fill(engine)
    it = engine.all()
    next(it)
    engine.close()
    with pytest.raises(StoreClosedError):
        next(it)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get(b"k"),
        lambda s: s.get_all([b"k"]),
        lambda s: s.put(b"k", b"v"),
        lambda s: s.put_all([(b"k", b"v")]),
        lambda s: s.delete(b"k"),
        lambda s: s.delete_all([b"k"]),
        lambda s: s.write_batch([(b"k", b"v")]),
        lambda s: s.range(b"a", b"b"),
        lambda s: s.prefix(b"a"),
        lambda s: s.all(),
        lambda s: s.flush(),
    ],
)
def test_closed_store_refuses_every_operation(engine: BytesStore, call: object) -> None:
    engine.close()
    engine.close()  # idempotent
    with pytest.raises(StoreClosedError, match="closed"):
        call(engine)  # type: ignore[operator]


def test_flush_and_compact(engine: BytesStore) -> None:
    fill(engine)
    engine.flush()
    engine.compact()  # type: ignore[attr-defined]
    assert pairs(engine.all()) == sorted(KEYS)


# -- RocksDB specifics -------------------------------------------------------------------------


def test_rocksdb_data_survives_close_and_reopen(tmp_path: Path) -> None:
    db = RocksDbEngine(tmp_path / "db", SMALL)
    db.put(b"k", b"v")
    db.write_batch([(b"nowal", b"x")], disable_wal=True)
    it = db.all()  # left open on purpose: close() must release it, or reopening fails
    next(it)
    db.close()
    again = RocksDbEngine(tmp_path / "db", SMALL)
    assert again.get_all([b"k", b"nowal"]) == {b"k": b"v", b"nowal": b"x"}
    again.close()


def test_rocksdb_second_open_of_a_live_directory_fails(tmp_path: Path) -> None:
    db = RocksDbEngine(tmp_path / "db", SMALL)
    with pytest.raises(StoreError, match="cannot open RocksDB store"):
        RocksDbEngine(tmp_path / "db", SMALL)
    db.close()


def test_rocksdb_destroy_removes_the_directory(tmp_path: Path) -> None:
    db = RocksDbEngine(tmp_path / "a" / "b" / "db", SMALL)  # parents are created
    db.put(b"k", b"v")
    db.destroy()
    assert not (tmp_path / "a" / "b" / "db").exists()
    assert db.closed


def test_rocksdb_checkpoint_is_an_openable_copy(tmp_path: Path) -> None:
    db = RocksDbEngine(tmp_path / "db", SMALL)
    db.put(b"k", b"v")
    db.checkpoint(tmp_path / "ckpt")
    db.put(b"later", b"x")
    db.close()
    copy = RocksDbEngine(tmp_path / "ckpt", SMALL)
    assert copy.get_all([b"k", b"later"]) == {b"k": b"v"}
    copy.close()


def test_in_memory_checkpoint_fails_clearly() -> None:
    with pytest.raises(StoreError, match="nothing on disk"):
        InMemoryEngine().checkpoint("/tmp/x")


def test_rocksdb_ttl_expires_entries_at_compaction(tmp_path: Path) -> None:
    options = RocksDbOptions.from_store_properties({"rocksdb.ttl.ms": "1000"})
    assert options.ttl_seconds == 1
    db = RocksDbEngine(tmp_path / "db", options)
    db.put(b"k", b"v")
    assert db.get(b"k") == b"v"
    time.sleep(2.1)
    db.compact()
    assert db.get(b"k") is None
    assert pairs(db.all()) == []
    db.close()


@pytest.mark.parametrize("compression", ["none", "snappy", "lz4", "zstd", "zlib"])
def test_rocksdb_compressions_open_and_round_trip(tmp_path: Path, compression: str) -> None:
    options = RocksDbOptions.from_store_properties({"rocksdb.compression": compression})
    db = RocksDbEngine(tmp_path / "db", options)
    db.put_all([(b"k%05d" % i, b"value" * 20) for i in range(2000)])
    db.flush()
    db.compact()
    assert db.get(b"k01999") == b"value" * 20
    db.close()


def test_rocksdb_options_from_samza_properties() -> None:
    options = RocksDbOptions.from_store_properties(
        {
            "rocksdb.compression": "LZ4",
            "rocksdb.block.size.bytes": "16384",
            "container.cache.size.bytes": "1048576",
            "container.write.buffer.size.bytes": "2097152",
            "rocksdb.num.write.buffers": "4",
            "rocksdb.compaction.style": "level",
            "rocksdb.bloom.filter.bits.per.key": "0",
            "rocksdb.ttl.ms": "1500",
            "unrelated.key": "ignored",
        }
    )
    assert options == RocksDbOptions(
        compression="lz4",
        block_size_bytes=16384,
        block_cache_size_bytes=1048576,
        write_buffer_size_bytes=2097152,
        num_write_buffers=4,
        compaction_style="level",
        bloom_bits_per_key=0,
        ttl_ms=1500,
    )
    assert options.ttl_seconds == 2  # rounded up


def test_rocksdb_options_defaults_follow_samza() -> None:
    options = RocksDbOptions.from_store_properties({})
    assert options.compression == "snappy"
    assert options.block_size_bytes == 4096
    assert options.block_cache_size_bytes == 100 * MiB
    assert options.write_buffer_size_bytes == 32 * MiB
    assert options.num_write_buffers == 3
    assert options.compaction_style == "universal"
    assert options.ttl_ms is None and options.ttl_seconds is None
    assert RocksDbOptions.from_store_properties({"rocksdb.ttl.ms": "0"}).ttl_ms is None


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"rocksdb.compression": "brotli"}, "rocksdb.compression: unknown codec 'brotli'"),
        ({"rocksdb.compaction.style": "tiered"}, "rocksdb.compaction.style: unknown style"),
        ({"rocksdb.block.size.bytes": "4k"}, "rocksdb.block.size.bytes: not a valid value"),
        ({"rocksdb.num.write.buffers": "0"}, "rocksdb.num.write.buffers: must be positive"),
        ({"rocksdb.ttl.ms": "soon"}, "rocksdb.ttl.ms: not a valid value"),
    ],
)
def test_rocksdb_options_reject_bad_values(props: dict[str, str], message: str) -> None:
    with pytest.raises(StoreConfigError, match=message):
        RocksDbOptions.from_store_properties(props)


def test_both_engines_satisfy_the_storage_engine_protocol(engine: BytesStore) -> None:
    # mypy checks the signatures (millpond/stores/engines/__init__.py); this checks that every
    # member of the protocol is present at run time.
    assert isinstance(engine, StorageEngine)
    members = ("get", "get_all", "put", "put_all", "delete", "delete_all", "range", "prefix",
               "all", "write_batch", "checkpoint", "flush", "close", "destroy", "path")
    for name in members:
        assert hasattr(engine, name), name
    assert not isinstance(object(), StorageEngine)

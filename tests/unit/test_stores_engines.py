"""Storage engines: every BytesStore method on RocksDB and in-memory, plus RocksDB specifics."""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from millpond.config import Config
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
from millpond.stores.engines.rocksdb_options import COMPRESSIONS, UNUSABLE_COMPRESSIONS
from millpond.tasks.storage import open_engine

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


# RocksDB's names for the codecs, as its OPTIONS file spells them.
ROCKSDB_CODECS = {
    "none": "kNoCompression", "snappy": "kSnappyCompression", "lz4": "kLZ4Compression",
    "lz4hc": "kLZ4HCCompression", "zstd": "kZSTD", "bzip2": "kBZip2Compression",
}


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_rocksdb_compressions_reach_rocksdb_and_round_trip(
    tmp_path: Path, compression: str
) -> None:
    options = RocksDbOptions.from_store_properties({"rocksdb.compression": compression})
    db = RocksDbEngine(tmp_path / "db", options)
    db.put_all([(b"k%05d" % i, b"value" * 20) for i in range(2000)])
    db.flush()
    db.compact()
    assert db.get(b"k01999") == b"value" * 20
    table = table_properties(db)
    db.close()
    assert options_file(tmp_path / "db")[CF]["compression"] == ROCKSDB_CODECS[compression]
    # The SST files' data blocks are compressed with the codec (the values are very
    # repetitive), or hold the raw bytes when the codec is none.
    raw = table["raw key size"] + table["raw value size"]
    if compression == "none":
        assert table["data block size"] > raw * 0.9  # (keys share prefixes)
    else:
        assert table["data block size"] < raw / 4


def test_zlib_is_refused_because_rocksdb_leaves_it_uncompressed(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="'zlib' is not supported: .* use zstd or lz4"):
        RocksDbOptions.from_store_properties({"rocksdb.compression": "zlib"})
    assert set(UNUSABLE_COMPRESSIONS) == {"zlib"}
    # The reason, checked on rocksdict directly: RocksDB takes the codec (its OPTIONS file
    # says zlib) yet writes the data blocks uncompressed. If a rocksdict upgrade fixes this,
    # this fails: move zlib back into COMPRESSIONS.
    from rocksdict import DBCompressionType, Rdict

    opts = SMALL.to_rocksdict()
    opts.set_compression_type(DBCompressionType.zlib())
    db = Rdict(str(tmp_path / "db"), opts)
    try:
        for i in range(2000):
            db[b"k%05d" % i] = b"value" * 20
        db.flush()
        table = parse_table_properties(
            db.property_value("rocksdb.aggregated-table-properties"))
    finally:
        db.close()
    assert options_file(tmp_path / "db")[CF]["compression"] == "kZlibCompression"
    assert table["data block size"] > 0.9 * (table["raw key size"] + table["raw value size"])


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
            "rocksdb.max.log.file.size.bytes": "1048576",
            "rocksdb.keep.log.file.num": "7",
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
        max_log_file_size_bytes=1048576,
        keep_log_file_num=7,
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
    assert options.max_log_file_size_bytes == 64 * MiB
    assert options.keep_log_file_num == 2
    assert options.ttl_ms is None and options.ttl_seconds is None
    assert RocksDbOptions.from_store_properties({"rocksdb.ttl.ms": "0"}).ttl_ms is None


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"rocksdb.compression": "brotli"}, "rocksdb.compression: unknown codec 'brotli'"),
        ({"rocksdb.compression": "ZLIB"}, "rocksdb.compression: 'zlib' is not supported"),
        ({"rocksdb.compaction.style": "tiered"}, "rocksdb.compaction.style: unknown style"),
        ({"rocksdb.block.size.bytes": "4k"}, "rocksdb.block.size.bytes: expected an integer, got '4k'"),
        ({"rocksdb.num.write.buffers": "0"}, "rocksdb.num.write.buffers: must be at least 1, got 0"),
        ({"rocksdb.ttl.ms": "soon"}, "rocksdb.ttl.ms: expected an integer, got 'soon'"),
        ({"rocksdb.keep.log.file.num": "0"}, "rocksdb.keep.log.file.num: must be at least 1"),
        ({"rocksdb.max.log.file.size.bytes": "-1"},
         "rocksdb.max.log.file.size.bytes: must be at least 0, got -1"),
    ],
)
def test_rocksdb_options_reject_bad_values(props: dict[str, str], message: str) -> None:
    with pytest.raises(StoreConfigError, match=message):
        RocksDbOptions.from_store_properties(props)


# -- engine options reach RocksDB -----------------------------------------------------------------
# RocksDB writes the options it opened a database with into the database directory
# (OPTIONS-<number>); the block cache's capacity and the SST files' table properties come from
# RocksDB's own properties. These tests read those, not millpond's RocksDbOptions.

DB = "DBOptions"
CF = 'CFOptions "default"'
TABLE = 'TableOptions/BlockBasedTable "default"'
STORE = "stores.s.factory=rocksdb\nstores.s.key.serde=bytes\nstores.s.msg.serde=bytes\n"

# Every engine key the README's configuration table lists (plus the Samza keys millpond also
# reads), each at a value other than its default.
EVERY_ENGINE_KEY = {
    "rocksdb.compression": "zstd",
    "rocksdb.block.size.bytes": "16384",
    "rocksdb.num.write.buffers": "5",
    "rocksdb.ttl.ms": "1500",
    "container.write.buffer.size.bytes": "2097152",
    "container.cache.size.bytes": "3145728",
    "rocksdb.bloom.filter.bits.per.key": "7",
    "rocksdb.compaction.style": "level",
    "rocksdb.max.log.file.size.bytes": "1048576",
    "rocksdb.keep.log.file.num": "5",
    "rocksdb.delete.obsolete.files.period.micros": "60000000",
    "rocksdb.max.manifest.file.size": "4194304",
}


def options_file(path: Path) -> dict[str, dict[str, str]]:
    """The newest OPTIONS-<number> file RocksDB wrote in ``path``: {section: {key: value}}."""
    numbered = [(int(m.group(1)), f) for f in path.iterdir()
                if (m := re.fullmatch(r"OPTIONS-(\d+)", f.name))]
    assert numbered, f"RocksDB wrote no OPTIONS file in {path}: {sorted(path.iterdir())}"
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in max(numbered)[1].read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            current = sections.setdefault(line[1:-1], {})
        elif line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            current[key] = value
    assert {DB, CF, TABLE} <= sections.keys(), sections.keys()
    return sections


def table_properties(db: RocksDbEngine) -> dict[str, int]:
    """RocksDB's aggregated table properties of the SST files (the numeric ones)."""
    return parse_table_properties(db._db.property_value("rocksdb.aggregated-table-properties"))


def parse_table_properties(text: str | None) -> dict[str, int]:
    assert text, "RocksDB reports no table properties"
    pairs = (item.rsplit("=", 1) for item in text.split("; ") if "=" in item)
    return {k.strip(): int(v) for k, v in pairs if v.strip().isdigit()}


def block_cache_capacity(db: RocksDbEngine) -> int | None:
    return db._db.property_int_value("rocksdb.block-cache-capacity")


def open_from_config(tmp_path: Path, keys: dict[str, str]) -> RocksDbEngine:
    """Load a job.properties with ``keys`` under store s (an unknown key would warn, and the
    warning fails the test) and open the store's engine as a task does."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    props = tmp_path / "job.properties"
    props.write_text("job.name=x\n" + STORE + "".join(f"stores.s.{k}={v}\n"
                                                     for k, v in keys.items()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = Config.load(props, env={})
    engine = open_engine(config.stores["s"], tmp_path / "live")
    assert isinstance(engine, RocksDbEngine)
    return engine


def fill_and_flush(db: RocksDbEngine, n: int = 20_000) -> None:
    db.put_all([(b"key-%010d" % i, b"v" * 50) for i in range(n)])
    db.flush()


def test_every_engine_key_in_the_config_reaches_rocksdb(tmp_path: Path) -> None:
    db = open_from_config(tmp_path, EVERY_ENGINE_KEY)
    fill_and_flush(db)
    table = table_properties(db)
    capacity = block_cache_capacity(db)
    db.close()
    written = options_file(tmp_path / "live")
    db_opts, cf, tbl = written[DB], written[CF], written[TABLE]

    assert cf["compression"] == "kZSTD"  # rocksdb.compression
    assert tbl["block_size"] == "16384"  # rocksdb.block.size.bytes
    assert cf["max_write_buffer_number"] == "5"  # rocksdb.num.write.buffers
    assert cf["write_buffer_size"] == "2097152"  # container.write.buffer.size.bytes
    assert capacity == 3145728  # container.cache.size.bytes
    assert tbl["filter_policy"] == "bloomfilter"  # rocksdb.bloom.filter.bits.per.key ...
    assert cf["memtable_whole_key_filtering"] == "true"  # ... and the memtable's filter
    assert float(cf["memtable_prefix_bloom_size_ratio"]) == pytest.approx(0.1)
    assert cf["compaction_style"] == "kCompactionStyleLevel"  # rocksdb.compaction.style
    # rocksdb.ttl.ms: RocksDB's TTL mode, 1500 ms rounded up to whole seconds.
    assert "TtlCompactionFilterFactory" in cf["compaction_filter_factory"]
    assert "ttl=2;" in cf["compaction_filter_factory"]
    assert db_opts["max_log_file_size"] == "1048576"  # rocksdb.max.log.file.size.bytes
    assert db_opts["keep_log_file_num"] == "5"  # rocksdb.keep.log.file.num
    assert db_opts["delete_obsolete_files_period_micros"] == "60000000"
    assert db_opts["max_manifest_file_size"] == "4194304"  # rocksdb.max.manifest.file.size

    # What the SST files show: ~7 filter bits per key, data blocks of ~16 KiB (uncompressed).
    assert table["# entries"] == 20_000
    assert 6 <= table["filter block size"] * 8 / table["# entries for filter"] <= 8
    raw_per_block = (table["raw key size"] + table["raw value size"]) / table["# data blocks"]
    assert 0.75 * 16384 <= raw_per_block <= 1.25 * 16384


def test_engine_defaults_reach_rocksdb(tmp_path: Path) -> None:
    db = open_from_config(tmp_path, {})
    fill_and_flush(db)
    table = table_properties(db)
    capacity = block_cache_capacity(db)
    db.close()
    written = options_file(tmp_path / "live")
    db_opts, cf, tbl = written[DB], written[CF], written[TABLE]

    assert cf["compression"] == "kSnappyCompression"
    assert tbl["block_size"] == "4096"
    assert cf["max_write_buffer_number"] == "3"
    assert cf["write_buffer_size"] == str(32 * MiB)
    assert capacity == 100 * MiB
    assert tbl["filter_policy"] == "bloomfilter"
    assert cf["memtable_whole_key_filtering"] == "true"
    assert cf["compaction_style"] == "kCompactionStyleUniversal"
    assert cf["compaction_filter_factory"] == "nullptr"  # no TTL
    assert db_opts["max_log_file_size"] == str(64 * MiB)
    assert db_opts["keep_log_file_num"] == "2"
    assert 9 <= table["filter block size"] * 8 / table["# entries for filter"] <= 11
    raw_per_block = (table["raw key size"] + table["raw value size"]) / table["# data blocks"]
    assert 0.75 * 4096 <= raw_per_block <= 1.25 * 4096


def test_bloom_filter_off_reaches_rocksdb(tmp_path: Path) -> None:
    db = open_from_config(tmp_path, {"rocksdb.bloom.filter.bits.per.key": "0"})
    fill_and_flush(db, 2000)
    table = table_properties(db)
    db.close()
    written = options_file(tmp_path / "live")
    assert written[TABLE]["filter_policy"] == "nullptr"
    assert written[CF]["memtable_whole_key_filtering"] == "false"
    assert float(written[CF]["memtable_prefix_bloom_size_ratio"]) == 0
    assert table["filter block size"] == 0


@pytest.mark.parametrize(
    ("style", "rocksdb_name"),
    [("universal", "kCompactionStyleUniversal"), ("level", "kCompactionStyleLevel"),
     ("fifo", "kCompactionStyleFIFO")],
)
def test_compaction_styles_reach_rocksdb(tmp_path: Path, style: str, rocksdb_name: str) -> None:
    db = open_from_config(tmp_path, {"rocksdb.compaction.style": style})
    fill_and_flush(db, 100)
    db.close()
    assert options_file(tmp_path / "live")[CF]["compaction_style"] == rocksdb_name


def info_logs(path: Path) -> list[str]:
    return sorted(f.name for f in path.iterdir() if f.name.startswith("LOG"))


def test_keep_log_file_num_bounds_rocksdb_info_logs(tmp_path: Path) -> None:
    # Every open starts a new info LOG (the previous one becomes LOG.old.<time>).
    for keep, at_most in (("2", 2), ("1000", 6)):
        for _ in range(6):
            db = open_from_config(tmp_path / keep, {"rocksdb.keep.log.file.num": keep})
            db.put(b"k", b"v")
            db.close()
        assert len(info_logs(tmp_path / keep / "live")) == at_most, info_logs(tmp_path / keep)


def test_max_log_file_size_rolls_rocksdb_info_log(tmp_path: Path) -> None:
    # Each flush writes a few hundred bytes to the info LOG: with a 4 KiB limit it rolls over
    # within one open, without a limit (0) it never does.
    for size, rolls in (("4096", True), ("0", False)):
        db = open_from_config(tmp_path / size, {"rocksdb.max.log.file.size.bytes": size,
                                                "rocksdb.keep.log.file.num": "1000"})
        for i in range(20):
            db.put(b"k%d" % i, b"v")
            db.flush()
        db.close()
        logs = info_logs(tmp_path / size / "live")
        assert (len(logs) > 1) is rolls, logs


def test_both_engines_satisfy_the_storage_engine_protocol(engine: BytesStore) -> None:
    # mypy checks the signatures (millpond/stores/engines/__init__.py); this checks that every
    # member of the protocol is present at run time.
    assert isinstance(engine, StorageEngine)
    members = ("get", "get_all", "put", "put_all", "delete", "delete_all", "range", "prefix",
               "all", "write_batch", "checkpoint", "flush", "close", "destroy", "path")
    for name in members:
        assert hasattr(engine, name), name
    assert not isinstance(object(), StorageEngine)

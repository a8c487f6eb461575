"""RocksDbOptions: the Samza store properties millpond understands, turned into rocksdict Options.

Property names and defaults follow Samza's RocksDbOptionsHelper (per store, not divided by task
count): rocksdb.compression=snappy, rocksdb.block.size.bytes=4096,
container.cache.size.bytes=100 MiB (block cache), container.write.buffer.size.bytes=32 MiB,
rocksdb.num.write.buffers=3, rocksdb.compaction.style=universal,
rocksdb.max.log.file.size.bytes=64 MiB and rocksdb.keep.log.file.num=2 (RocksDB's own info LOG
files), plus rocksdb.ttl.ms (off by default). Unlike Samza, an unknown value is an error rather
than a silent fallback; so is rocksdb.compression=zlib, which this RocksDB build accepts but
never applies (see UNUSABLE_COMPRESSIONS).

Process memory: once a process has a memory plan (:func:`use_process_memory`, which every
job's process calls with ``job.container.memory.mb``'s division), a store without its own
container.cache.size.bytes uses the ONE block cache of the process, and every store's memtables
are counted by ONE write-buffer manager charged to that cache (RocksDB's and Kafka Streams'
"bounded memory" set-up), so blocks and memtables of all stores stay within the cache's
capacity. A store without its own container.write.buffer.size.bytes then gets the plan's
memtable size.

One millpond extension: rocksdb.bloom.filter.bits.per.key (default 10, 0 = off). Samza sets no
bloom filter; with one, a point lookup skips the sorted runs that cannot hold the key, which
roughly doubles random get throughput under universal compaction for ~1.25 bytes per key.
The same setting gives the memtable a whole-key bloom filter, so a get of a key not written
since the last flush skips the memtable's skiplist search.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TypeVar

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    Cache,
    DBCompactionStyle,
    DBCompressionType,
    Options,
    WriteBufferManager,
)

from millpond.config.properties import Properties
from millpond.config.values import check_range, parse_int
from millpond.stores.errors import StoreConfigError

COMPRESSIONS: dict[str, Callable[[], DBCompressionType]] = {
    "none": DBCompressionType.none,
    "snappy": DBCompressionType.snappy,
    "lz4": DBCompressionType.lz4,
    "lz4hc": DBCompressionType.lz4hc,
    "zstd": DBCompressionType.zstd,
    "bzip2": DBCompressionType.bz2,
}

# Samza codecs this RocksDB build accepts but cannot use: an error rather than a store that is
# silently left uncompressed. (tests/unit/test_stores_engines.py checks that this still holds.)
UNUSABLE_COMPRESSIONS = {
    "zlib": "rocksdict's RocksDB rejects every zlib-compressed block and stores it "
            "uncompressed; use zstd or lz4 instead",
}

COMPACTION_STYLES: dict[str, Callable[[], DBCompactionStyle]] = {
    "universal": DBCompactionStyle.universal,
    "level": DBCompactionStyle.level,
    "fifo": DBCompactionStyle.fifo,
}

MiB = 1024 * 1024
T = TypeVar("T")


class ProcessMemory:
    """The block cache and write-buffer manager every store of this process shares."""

    def __init__(self, block_cache_bytes: int, write_buffer_bytes: int, memtable_bytes: int,
                 ) -> None:
        self.block_cache_bytes = block_cache_bytes
        self.write_buffer_bytes = write_buffer_bytes
        self.memtable_bytes = memtable_bytes
        self.cache = Cache(block_cache_bytes)
        # Memtables are charged to the cache: together they stay within its capacity.
        self.write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            write_buffer_bytes, False, self.cache)

    def usage(self) -> tuple[int, int]:
        """(bytes in the block cache, memtables included; bytes of memtables)."""
        return self.cache.get_usage(), self.write_buffers.get_usage()


_process_memory: ProcessMemory | None = None


def use_process_memory(block_cache_bytes: int, write_buffer_bytes: int, memtable_bytes: int,
                       ) -> ProcessMemory:
    """Make (or resize) the process's shared block cache and write-buffer manager; stores
    opened from now on use them (see the module's docstring)."""
    global _process_memory
    current = _process_memory
    if current is not None and current.write_buffer_bytes == write_buffer_bytes \
            and current.memtable_bytes == memtable_bytes:
        if current.block_cache_bytes != block_cache_bytes:
            current.cache.set_capacity(block_cache_bytes)
            current.block_cache_bytes = block_cache_bytes
        return current
    _process_memory = ProcessMemory(block_cache_bytes, write_buffer_bytes, memtable_bytes)
    return _process_memory


def process_memory() -> ProcessMemory | None:
    """The process's shared RocksDB memory, if a plan set it."""
    return _process_memory


@dataclass(frozen=True)
class RocksDbOptions:
    """Tuning of one RocksDB store; build from config with ``from_store_properties``."""

    compression: str = "snappy"
    block_size_bytes: int = 4096
    block_cache_size_bytes: int = 100 * MiB
    write_buffer_size_bytes: int = 32 * MiB
    num_write_buffers: int = 3
    compaction_style: str = "universal"
    bloom_bits_per_key: int = 10  # 0 = no bloom filter
    ttl_ms: int | None = None  # entries older than this vanish at compaction; None/<=0 = keep
    max_log_file_size_bytes: int = 64 * MiB  # RocksDB's info LOG rolls at this size; 0 = never
    keep_log_file_num: int = 2  # info LOG files kept (the current one and rolled ones)
    # Samza's rocksdb.delete.obsolete.files.period.micros (RocksDB's default: 6 h) and
    # rocksdb.max.manifest.file.size (Samza's default: 1 GiB); None = RocksDB's default.
    delete_obsolete_files_period_micros: int | None = None
    max_manifest_file_size: int | None = None
    # The process's shared block cache and write-buffer manager (None: this store's own
    # block cache of block_cache_size_bytes and no write-buffer manager).
    shared: ProcessMemory | None = dataclass_field(default=None, compare=False, repr=False)
    shared_cache: bool = False  # True: blocks go to ``shared``'s cache, not one of its own

    def __post_init__(self) -> None:
        for name, number in (
            ("rocksdb.delete.obsolete.files.period.micros",
             self.delete_obsolete_files_period_micros),
            ("rocksdb.max.manifest.file.size", self.max_manifest_file_size),
        ):
            if number is not None and number < 0:
                raise StoreConfigError(f"{name}: must be >= 0, got {number}")
        if self.compression in UNUSABLE_COMPRESSIONS:
            raise StoreConfigError(
                f"rocksdb.compression: {self.compression!r} is not supported: "
                f"{UNUSABLE_COMPRESSIONS[self.compression]}"
            )
        if self.compression not in COMPRESSIONS:
            raise StoreConfigError(
                f"rocksdb.compression: unknown codec {self.compression!r} "
                f"(one of {', '.join(COMPRESSIONS)})"
            )
        if self.compaction_style not in COMPACTION_STYLES:
            raise StoreConfigError(
                f"rocksdb.compaction.style: unknown style {self.compaction_style!r} "
                f"(one of {', '.join(COMPACTION_STYLES)})"
            )
        for field, value in (
            ("rocksdb.block.size.bytes", self.block_size_bytes),
            ("container.cache.size.bytes", self.block_cache_size_bytes),
            ("container.write.buffer.size.bytes", self.write_buffer_size_bytes),
            ("rocksdb.num.write.buffers", self.num_write_buffers),
        ):
            if value <= 0:
                raise StoreConfigError(f"{field}: must be positive, got {value}")
        if self.max_log_file_size_bytes < 0:
            raise StoreConfigError(
                "rocksdb.max.log.file.size.bytes: must be >= 0, "
                f"got {self.max_log_file_size_bytes}"
            )
        if self.keep_log_file_num <= 0:
            raise StoreConfigError(
                f"rocksdb.keep.log.file.num: must be positive, got {self.keep_log_file_num}"
            )
        if self.bloom_bits_per_key < 0:
            raise StoreConfigError(
                f"rocksdb.bloom.filter.bits.per.key: must be >= 0, got {self.bloom_bits_per_key}"
            )

    @classmethod
    def from_store_properties(cls, props: Mapping[str, str]) -> RocksDbOptions:
        """Read the Samza property names (keys relative to ``stores.<name>.``). With a
        process memory plan (:func:`use_process_memory`), a store without its own
        container.cache.size.bytes shares the process's block cache, and one without its
        own container.write.buffer.size.bytes gets the plan's memtable size."""
        shared = _process_memory
        d = cls() if shared is None else cls(write_buffer_size_bytes=shared.memtable_bytes)
        own_cache = bool((props.get("container.cache.size.bytes") or "").strip())

        def get(key: str, parse: Callable[[str], T], default: T) -> T:
            raw = props.get(key)
            if raw is None or not raw.strip():
                return default
            try:
                return parse(raw.strip())
            except ValueError as exc:
                raise StoreConfigError(f"{_located(props, key)}: {exc}") from None

        positive, non_negative = _int_from(1), _int_from(0)
        ttl = get("rocksdb.ttl.ms", parse_int, 0)
        return cls(
            compression=get("rocksdb.compression", str.lower, d.compression),
            block_size_bytes=get("rocksdb.block.size.bytes", positive, d.block_size_bytes),
            block_cache_size_bytes=get("container.cache.size.bytes", positive,
                                       d.block_cache_size_bytes),
            write_buffer_size_bytes=get("container.write.buffer.size.bytes", positive,
                                        d.write_buffer_size_bytes),
            num_write_buffers=get("rocksdb.num.write.buffers", positive, d.num_write_buffers),
            compaction_style=get("rocksdb.compaction.style", str.lower, d.compaction_style),
            bloom_bits_per_key=get("rocksdb.bloom.filter.bits.per.key", non_negative,
                                   d.bloom_bits_per_key),
            ttl_ms=ttl if ttl > 0 else None,
            max_log_file_size_bytes=get("rocksdb.max.log.file.size.bytes", non_negative,
                                        d.max_log_file_size_bytes),
            keep_log_file_num=get("rocksdb.keep.log.file.num", positive, d.keep_log_file_num),
            delete_obsolete_files_period_micros=get(
                "rocksdb.delete.obsolete.files.period.micros", parse_int, None),
            max_manifest_file_size=get("rocksdb.max.manifest.file.size", parse_int, None),
            shared=shared,
            shared_cache=shared is not None and not own_cache,
        )

    @property
    def ttl_seconds(self) -> int | None:
        """TTL for RocksDB's TTL mode, in whole seconds rounded up (it has 1 s resolution)."""
        if self.ttl_ms is None or self.ttl_ms <= 0:
            return None
        return math.ceil(self.ttl_ms / 1000)

    def to_rocksdict(self) -> Options:
        """rocksdict Options in raw-bytes mode, creating the database if missing."""
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(COMPRESSIONS[self.compression]())
        opts.set_compaction_style(COMPACTION_STYLES[self.compaction_style]())
        opts.set_write_buffer_size(self.write_buffer_size_bytes)
        opts.set_max_write_buffer_number(self.num_write_buffers)
        opts.set_max_log_file_size(self.max_log_file_size_bytes)
        opts.set_keep_log_file_num(self.keep_log_file_num)
        if self.delete_obsolete_files_period_micros is not None:
            opts.set_delete_obsolete_files_period_micros(self.delete_obsolete_files_period_micros)
        if self.max_manifest_file_size is not None:
            opts.set_max_manifest_file_size(self.max_manifest_file_size)
        table = BlockBasedOptions()
        table.set_block_size(self.block_size_bytes)
        if self.shared is not None:
            opts.set_write_buffer_manager(self.shared.write_buffers)
            # Index and filter blocks grow with the store (~6% of a store of 1 KB values):
            # kept in the block cache they are bounded with it, as Kafka Streams' bounded
            # memory set-up does (not pinned: under universal compaction every file is in
            # level 0, so pinning level 0 would pin them all).
            table.set_cache_index_and_filter_blocks(True)
        table.set_block_cache(self.shared.cache if self.shared is not None and self.shared_cache
                              else Cache(self.block_cache_size_bytes))
        if self.bloom_bits_per_key:
            table.set_bloom_filter(self.bloom_bits_per_key, False)
        opts.set_block_based_table_factory(table)
        if self.bloom_bits_per_key:
            # The memtable gets a whole-key bloom filter too (10% of the write buffer): a get
            # of a key not written since the last flush skips the skiplist search.
            opts.set_memtable_whole_key_filtering(True)
            opts.set_memtable_prefix_bloom_ratio(0.1)
        return opts

    def access_type(self) -> AccessType:
        """Read-write, or TTL mode (expired entries are dropped when compaction reaches them)."""
        seconds = self.ttl_seconds
        return AccessType.read_write() if seconds is None else AccessType.with_ttl(seconds)


def _int_from(minimum: int) -> Callable[[str], int]:
    """A parser of integers (:func:`~millpond.config.values.parse_int`) at least ``minimum``."""
    return lambda text: check_range(parse_int(text), minimum)


def _located(props: Mapping[str, str], key: str) -> str:
    """``file:line: stores.<name>.<key>`` where ``key`` was set, if ``props`` keeps locations
    (a store's parsed :class:`~millpond.config.Properties`); just ``key`` for a plain mapping."""
    if not isinstance(props, Properties):
        return key
    full = props.prefix + key
    found = props.location(key)
    if not found:
        return full
    file, line = found
    return f"{file}:{line}: {full}" if line else f"{file}: {full}"

"""Real RocksDB checkpoints to back up."""

from __future__ import annotations

from pathlib import Path

from millpond.changelog.checkpoint import StoreOffset, write_offset_file
from millpond.stores import RocksDbEngine

TOPIC = "job-counts-changelog"


def checkpoint(engine: RocksDbEngine, dest: Path, offset: int, partition: int = 0) -> Path:
    """Flush ``engine`` and write its RocksDB checkpoint with an ``OFFSET`` into ``dest``."""
    engine.flush()
    engine.checkpoint(dest)
    write_offset_file(dest, StoreOffset("counts", TOPIC, partition, offset))
    return dest


def fill(engine: RocksDbEngine, start: int, n: int, tag: str = "v") -> None:
    """Write keys ``start..start+n`` (one SST per flush)."""
    engine.write_batch([(f"k{i:07d}".encode(), f"{tag}{i}".encode() * 10)
                        for i in range(start, start + n)], disable_wal=True)


def contents(path: Path) -> dict[bytes, bytes]:
    engine = RocksDbEngine(path)
    try:
        with engine.all() as entries:
            return dict(entries)
    finally:
        engine.close()

"""Storage engines: RocksDB (on disk, via rocksdict) and an ordered in-memory store."""

from millpond.stores.engines.memory import InMemoryEngine
from millpond.stores.engines.rocksdb import RocksDbEngine, RocksDbOptions

__all__ = ["InMemoryEngine", "RocksDbEngine", "RocksDbOptions"]

"""Storage engines: RocksDB (on disk, via rocksdict) and an ordered in-memory store."""

from typing import TYPE_CHECKING

from millpond.stores.engines.memory import InMemoryEngine
from millpond.stores.engines.rocksdb import RocksDbEngine, RocksDbOptions

__all__ = ["InMemoryEngine", "RocksDbEngine", "RocksDbOptions"]

if TYPE_CHECKING:  # mypy proves both engines satisfy the StorageEngine protocol
    from millpond.stores.api import StorageEngine

    def _rocksdb_is_an_engine(engine: RocksDbEngine) -> StorageEngine:
        return engine

    def _memory_is_an_engine(engine: InMemoryEngine) -> StorageEngine:
        return engine

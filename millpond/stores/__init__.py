"""millpond.stores: Samza-style key-value stores.

Engines (RocksDbEngine, InMemoryEngine) store bytes; CachedStore adds an LRU write-back cache;
SerializedStore gives the typed KeyValueStore tasks use; build_store stacks them.
"""

from millpond.stores.api import BytesStore, KeyValueIterator, KeyValueStore
from millpond.stores.build import build_store
from millpond.stores.cached import CachedStore
from millpond.stores.engines import InMemoryEngine, RocksDbEngine, RocksDbOptions
from millpond.stores.errors import (
    NoneEntryError,
    StoreClosedError,
    StoreConfigError,
    StoreError,
)
from millpond.stores.serialized import SerializedStore

__all__ = [
    "BytesStore",
    "CachedStore",
    "InMemoryEngine",
    "KeyValueIterator",
    "KeyValueStore",
    "NoneEntryError",
    "RocksDbEngine",
    "RocksDbOptions",
    "SerializedStore",
    "StoreClosedError",
    "StoreConfigError",
    "StoreError",
    "build_store",
]

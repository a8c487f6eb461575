"""millpond.stores: Samza-style key-value stores.

Engines (RocksDbEngine, InMemoryEngine) store bytes; SerializedStore turns them typed;
CachedStore caches deserialized objects with write-back; NullSafeStore rejects None on top;
LargeMessageSafeStore refuses or drops values too large for the changelog.
build_stack/build_store (millpond.stores.factory) stack them.
"""

from millpond.stores.api import BytesStore, KeyValueIterator, KeyValueStore, StorageEngine
from millpond.stores.cached import CachedStore
from millpond.stores.engines import InMemoryEngine, RocksDbEngine, RocksDbOptions
from millpond.stores.errors import (
    LargeMessageError,
    NoneEntryError,
    StoreClosedError,
    StoreConfigError,
    StoreError,
)
from millpond.stores.factory import StoreStack, build_stack, build_store
from millpond.stores.largemessage import LargeMessageSafeStore
from millpond.stores.nullsafe import NullSafeStore
from millpond.stores.serialized import SerializedStore

__all__ = [
    "BytesStore",
    "CachedStore",
    "InMemoryEngine",
    "KeyValueIterator",
    "KeyValueStore",
    "LargeMessageError",
    "LargeMessageSafeStore",
    "NoneEntryError",
    "NullSafeStore",
    "RocksDbEngine",
    "RocksDbOptions",
    "SerializedStore",
    "StorageEngine",
    "StoreClosedError",
    "StoreConfigError",
    "StoreError",
    "StoreStack",
    "build_stack",
    "build_store",
]

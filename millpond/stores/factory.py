"""The store factory: the one place the layers of a store are stacked.

Top to bottom, as Samza's samza-kv stacks them::

    NullSafeStore          rejects None keys/values once, at the API boundary
    CachedStore            LRU write-back cache of deserialized objects (object.cache.size > 0);
                           journals a record's writes so a skipped record is undone
    [UndoLogStore]         without a cache, in the task runtime: the same journal
    SerializedStore        key/value serdes: objects <-> bytes
    [LargeMessageSafeStore] refuses or drops values over changelog.max.message.size.bytes
                           (disallow.large.messages / drop.large.messages, as in Samza)
    [logged layer]         mirrors every write to the changelog (if the store has one)
    StorageEngine          RocksDB or in memory

A value the large-message layer drops is reported to the cache, which forgets it after the
write-down: the task then reads the key's previous value, never one the store does not hold.

Why this order: the cache sits above the serdes so a hit costs a dict lookup (no
deserialization, no engine call) and a key written many times between commits is serialized,
written to the engine and sent to the changelog once, at write-down. The logged layer sits
directly on the engine so that everything the engine applies is exactly what the changelog
receives, batch by batch. Null checks happen once at the top because every layer below can
then trust its input.

The logged layer is passed in as a function of the engine (``logged``), so this package does
not import the changelog code (nor Kafka): ``millpond.tasks.storage`` gives
``lambda engine: LoggedStore(engine, producer, topic, partition, ...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from millpond.serdes import Serde
from millpond.stores.api import BytesStore, KeyValueStore, StorageEngine
from millpond.stores.cached import (
    DEFAULT_CACHE_MAX_BYTES,
    DEFAULT_OBJECT_CACHE_SIZE,
    DEFAULT_WRITE_BATCH_SIZE,
    CachedStore,
)
from millpond.stores.largemessage import DEFAULT_MAX_MESSAGE_SIZE, LargeMessageSafeStore, Policy
from millpond.stores.nullsafe import NullSafeStore
from millpond.stores.serialized import SerializedStore
from millpond.stores.undo import RecordJournal, UndoLogStore

L = TypeVar("L", bound=BytesStore)


@dataclass(frozen=True)
class StoreStack(Generic[L]):
    """A built store: the typed top the task uses, and the layers the commit needs."""

    store: KeyValueStore[Any, Any]  # the null-safe top of the stack
    engine: StorageEngine
    logged: L | None  # the changelog layer, if one was asked for
    cache: CachedStore[Any, Any] | None = None  # the object cache, if the store has one
    large: LargeMessageSafeStore | None = None  # the large-message layer, if asked for


def build_stack(
    name: str,
    engine: StorageEngine,
    key_serde: Serde[Any],
    msg_serde: Serde[Any],
    object_cache_size: int = DEFAULT_OBJECT_CACHE_SIZE,
    write_batch_size: int = DEFAULT_WRITE_BATCH_SIZE,
    *,
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
    logged: Callable[[StorageEngine], L] | None = None,
    large_messages: Policy | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    journal: RecordJournal | None = None,
) -> StoreStack[L]:
    """Stack store ``name`` over ``engine``: null-safe -> cached -> serialized -> [logged].

    ``object_cache_size`` / ``cache_max_bytes``: entry and (estimated) byte bounds of the
    object cache, 0 for either leaves the cache out. ``write_batch_size``: dirty entries
    that force a write-down (0 = write-through). ``logged`` wraps the engine in the
    changelog layer; None for a store without a changelog. ``large_messages`` ("disallow"
    or "drop", None = no check) adds the large-message layer for values over
    ``max_message_size`` bytes. ``journal``: the task's record journal, which undoes a
    skipped record's writes (the cache journals; without a cache an UndoLogStore does).
    """
    log_layer = logged(engine) if logged is not None else None
    below: BytesStore = log_layer if log_layer is not None else engine
    large = None
    if large_messages is not None:
        below = large = LargeMessageSafeStore(below, name, large_messages, max_message_size)
    typed: KeyValueStore[Any, Any] = SerializedStore(below, key_serde, msg_serde, name)
    cache = None
    if object_cache_size > 0 and cache_max_bytes > 0:
        cache = CachedStore(typed, name, object_cache_size, write_batch_size, cache_max_bytes,
                            merge_scans=key_serde.sorts_as_objects)
        if large is not None:
            large.on_drop = cache.refused_at  # a dropped value must not stay visible
        typed = cache
        if journal is not None:
            journal.attach(cache)
    elif journal is not None:
        typed = UndoLogStore(typed, name)
        journal.attach(typed)
    return StoreStack(NullSafeStore(typed, name), engine, log_layer, cache, large)


def build_store(
    name: str,
    engine: StorageEngine,
    key_serde: Serde[Any],
    msg_serde: Serde[Any],
    object_cache_size: int = DEFAULT_OBJECT_CACHE_SIZE,
    write_batch_size: int = DEFAULT_WRITE_BATCH_SIZE,
    *,
    cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES,
) -> KeyValueStore[Any, Any]:
    """The typed store ``name`` over ``engine`` without a changelog (see build_stack)."""
    stack: StoreStack[BytesStore] = build_stack(
        name, engine, key_serde, msg_serde, object_cache_size, write_batch_size,
        cache_max_bytes=cache_max_bytes,
    )
    return stack.store

"""build_store: stack the layers a task's store is made of (serialized -> cached -> inner)."""

from __future__ import annotations

from typing import Any

from millpond.serdes import Serde
from millpond.stores.api import BytesStore, KeyValueStore
from millpond.stores.cached import CachedStore
from millpond.stores.serialized import SerializedStore


def build_store(
    name: str,
    inner: BytesStore,
    key_serde: Serde[Any],
    msg_serde: Serde[Any],
    cache_size: int = 1000,
    write_batch_size: int = 500,
) -> KeyValueStore[Any, Any]:
    """Typed store ``name`` over ``inner`` (an engine, or the logged layer around one).

    ``cache_size`` is Samza's object.cache.size (0 = no cache layer), ``write_batch_size``
    its write.batch.size.
    """
    below: BytesStore = inner
    if cache_size > 0:
        below = CachedStore(inner, cache_size=cache_size, write_batch_size=write_batch_size)
    return SerializedStore(below, key_serde, msg_serde, name)

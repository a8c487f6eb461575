"""LargeMessageSafeStore: Samza's guard against values the changelog cannot hold.

It sits between the serialized layer and the logged layer (or the engine), as Samza's
``LargeMessageSafeStore`` does, and checks each serialized value against
``stores.<s>.changelog.max.message.size.bytes`` (Samza's default 1 MiB):

* ``disallow`` (``disallow.large.messages=true``): a larger value raises
  ``LargeMessageError`` naming the store, the key and the size. The whole batch is checked
  before any of it goes down, so neither the engine nor the changelog receives any of it,
  and the error stops the job before its commit: nothing after the last commit is committed.
* ``drop`` (``drop.large.messages=true``): a larger value is not written, neither to the
  engine nor to the changelog (the key keeps its previous value); it is counted
  (``dropped``), logged with store, key and size, and reported through ``on_drop`` so the
  object cache above can forget the value it still holds (``CachedStore.forget``): after
  the write-down the task reads what the store really has.

Deletes (None values) and reads pass straight through.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from millpond.stores.api import BytesStore
from millpond.stores.errors import LargeMessageError

log = logging.getLogger(__name__)

Policy = Literal["disallow", "drop"]
DEFAULT_MAX_MESSAGE_SIZE = 1_048_576  # Samza's StorageConfig.DEFAULT_CHANGELOG_MAX_MSG_SIZE_BYTES


def show_key(key: bytes) -> str:
    """A key for messages: its text when it is printable UTF-8, else hex (both shortened)."""
    try:
        text = key.decode()
    except UnicodeDecodeError:
        text = ""
    if text and text.isprintable():
        return repr(text if len(text) <= 80 else text[:80] + "...")
    return "0x" + (key.hex() if len(key) <= 40 else key[:40].hex() + "...")


class LargeMessageSafeStore:
    """A BytesStore over ``inner`` that refuses or drops values over ``max_message_size``."""

    def __init__(
        self, inner: BytesStore, store_name: str, policy: Policy,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        if policy not in ("disallow", "drop"):
            raise ValueError(f"policy must be 'disallow' or 'drop', got {policy!r}")
        self.inner = inner
        self.name = store_name
        self.policy = policy
        self.max_message_size = max_message_size
        self.on_drop = on_drop  # called with the index in the batch of each dropped entry
        self.dropped = 0  # values dropped so far (drop policy)
        self.get = inner.get
        self.get_all = inner.get_all
        self.range = inner.range
        self.prefix = inner.prefix
        self.all = inner.all

    def __repr__(self) -> str:
        return (f"LargeMessageSafeStore({self.name!r}, {self.policy} > "
                f"{self.max_message_size} B, over {self.inner!r})")

    def write_batch(self, items: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Check every value, then write the batch (without dropped entries) below."""
        limit = self.max_message_size
        large = [i for i, (_, value) in enumerate(items)
                 if value is not None and len(value) > limit]
        if not large:
            self.inner.write_batch(items)
            return
        if self.policy == "disallow":
            key, value = items[large[0]]
            assert value is not None
            raise LargeMessageError(
                f"key {show_key(key)}: value of {len(value)} bytes is larger than "
                f"changelog.max.message.size.bytes={limit} (disallow.large.messages=true); "
                "nothing of this write-down was stored or sent", store=self.name)
        skip = set(large)
        for i in large:
            key, value = items[i]
            assert value is not None
            self.dropped += 1
            log.warning("store %r: dropped the write of key %s: value of %d bytes is larger "
                        "than changelog.max.message.size.bytes=%d (drop.large.messages=true); "
                        "the key keeps its previous value (%d dropped so far)",
                        self.name, show_key(key), len(value), limit, self.dropped)
            if self.on_drop is not None:
                self.on_drop(i)
        kept = [item for i, item in enumerate(items) if i not in skip]
        if kept:
            self.inner.write_batch(kept)

    def put(self, key: bytes, value: bytes) -> None:
        self.write_batch([(key, value)])

    def put_all(self, items: Iterable[tuple[bytes, bytes]]) -> None:
        self.write_batch(list(items))

    def delete(self, key: bytes) -> None:
        self.inner.delete(key)

    def delete_all(self, keys: Iterable[bytes]) -> None:
        self.inner.delete_all(keys)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

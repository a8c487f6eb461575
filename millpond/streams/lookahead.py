"""Batched table reads for lookup joins: before a polled batch runs through the fused
chains, each table that a stream joins by the record's key is read once for all the batch's
keys (``get_all``: the object cache's hits, then one RocksDB multi-get for its misses)
instead of once per record (a multi-get costs about two thirds of the gets it replaces, and
the store layers are crossed once a batch, not once a record).

What a record sees is what a get at its turn would return: the values read ahead are the
stores' as the batch starts, and the only writer of a table's store during a batch is the
table's own operator (its topic is an input of the same task), which forgets the key it
writes, so a record after that write reads the store again. A global table's store is
written by the side-input processor between batches, never during one; the values read
ahead are dropped when the batch ends. Reading ahead is a hint: a batch whose keys cannot be
read together (a key that does not decode or hash, a store error) is read per record as
before, where an error names its record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from millpond.streams.dataflow import Node

log = logging.getLogger("millpond.streams")

# Operators after which a record's key is still the input record's: a lookup join below
# them looks up the key the consumer gave (key_by re-keys through an internal topic, a
# source of its own; windows and aggregations emit later or for other keys: not followed).
KEEPS_KEY = frozenset({"source", "route", "merge", "branch", "map", "map_kv", "filter",
                       "flat_map", "peek", "join"})
_UNREAD = object()


class Lookahead:
    """The values of one table's store for the keys of the batch being processed."""

    __slots__ = ("store", "name", "values", "_warned")

    def __init__(self, store: Any, name: str) -> None:
        self.store = store
        self.name = name
        self.values: dict[Any, Any] = {}
        self._warned = False

    def load(self, keys: Iterable[Any]) -> None:
        """Read ``keys`` (present or not) with one ``get_all``; on any failure read nothing
        ahead (each record's own get then raises where its record is named)."""
        try:
            values = dict.fromkeys(keys)
            values.update(self.store.get_all(values))
        except Exception as exc:  # a hint only: the per-record reads decide
            if not self._warned:
                self._warned = True
                log.warning("table %s: reading a batch's keys together failed (%s: %s); "
                            "such batches are read a record at a time", self.name,
                            type(exc).__name__, exc)
            values = {}
        self.values = values

    def get(self, key: Any) -> Any:
        """``key``'s value: read ahead, else from the store."""
        try:
            value = self.values.get(key, _UNREAD)
        except TypeError:  # an unhashable key (no object cache): never read ahead
            value = _UNREAD
        return self.store.get(key) if value is _UNREAD else value

    def forget(self, key: Any) -> None:
        """``key`` is being written: later reads go to the store."""
        if self.values:
            try:
                self.values.pop(key, None)
            except TypeError:
                pass

    def clear(self) -> None:
        self.values = {}


def lookahead(memo: dict[Any, Any], name: str, store: Any) -> Lookahead:
    """The one Lookahead of table store ``name`` in a task's chains (``memo``: bind's)."""
    slot = ("lookahead", name)
    found: Lookahead | None = memo.get(slot)
    if found is None:
        found = memo[slot] = Lookahead(store, name)
    return found


def joined_tables(node: Node) -> list[str]:
    """The table stores that lookup joins by key meet below ``node`` while the record's key
    is still the one it came with, each once, in the order met."""
    names: dict[str, None] = {}
    seen: set[int] = set()
    todo = [node]
    while todo:
        here = todo.pop()
        if id(here) in seen:
            continue
        seen.add(id(here))
        for child in here.children:
            if child.kind == "join" and child.fn[3] is None:
                names.setdefault(child.fn[0])
            if child.kind in KEEPS_KEY:
                todo.append(child)
    return list(names)


class BatchReads:
    """Per input topic, the tables to read ahead for a batch's records of that topic."""

    def __init__(self, by_topic: dict[str, list[Lookahead]]) -> None:
        self.by_topic = {topic: tables for topic, tables in by_topic.items() if tables}
        self._loaded: list[Lookahead] = []

    def __bool__(self) -> bool:
        return bool(self.by_topic)

    def before(self, msgs: list[Any], serdes_of: Callable[[str], Any]) -> None:
        """Read ahead the keys of ``msgs`` (confluent-kafka messages, this task's batch)."""
        keys: dict[str, list[Any]] = {}
        by_topic = self.by_topic
        for msg in msgs:
            topic = msg.topic()
            if topic in by_topic:
                raw = msg.key()
                if raw is not None:
                    keys.setdefault(topic, []).append(raw)
        wanted: dict[int, tuple[Lookahead, list[Any]]] = {}
        for topic, raws in keys.items():
            key_serde = serdes_of(topic)[0]
            if key_serde is not None:
                decode = key_serde.from_bytes
                try:
                    decoded = [decode(raw) for raw in raws]
                except Exception:  # a key that does not decode: its record says so later
                    continue
            else:
                decoded = raws
            for table in by_topic[topic]:  # a table two topics join: one read for both
                wanted.setdefault(id(table), (table, []))[1].extend(decoded)
        for table, table_keys in wanted.values():
            table.load(table_keys)
            self._loaded.append(table)

    def after(self) -> None:
        """The batch is done: nothing read ahead is used again."""
        for table in self._loaded:
            table.clear()
        self._loaded = []

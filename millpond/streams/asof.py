"""Versioned tables and as-of joins: a table that keeps each key's values by time, and a
stream joined with the table's value at or before each record's time.

The table's store keys each version ``<key as JSON>|<time, 16 digits>`` (``{"v": value}``; a
null value is a deletion, kept as ``{"v": null}``), so a key's versions are one range scan
in time order. Its stream time (the largest version time seen) is under ``~stream-time``.
History is kept for ``retention`` ms: with ``cut = stream time - retention``, only the latest
version at or before ``cut`` and the newer ones are needed by a lookup at ``cut`` or later,
so older ones are deleted (found through ``x|<time>|<seq>`` entries of versions not yet
settled); a version older than ``cut`` when it comes is late (counted, dropped), and a lookup
before ``cut`` finds nothing (Kafka Streams' versioned stores do the same).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from millpond.streams.errors import DataflowError, OperatorError
from millpond.streams.timers import stored_time
from millpond.streams.windows import STREAM_TIME, WIDTH, _positive, time_of

Step = Callable[[Any, Any, int], None]
SEQ = "~seq"


@dataclass(frozen=True)
class VersionedSpec:
    """A versioned table: how long its history is kept and where a version's time is."""

    retention: int
    timestamp: Callable[[Any], int] | None


def versioned(name: str, retention_ms: int,
              timestamp: Callable[[Any], int] | None) -> VersionedSpec:
    if timestamp is not None and not callable(timestamp):
        raise DataflowError(f"versioned_table {name!r}: timestamp must be a function of the "
                            "value")
    return VersionedSpec(_positive(f"versioned_table {name!r}: retention_ms", retention_ms),
                         timestamp)


def _versions(store: Any, json_key: str, until: int) -> list[tuple[int, Any]]:
    """``(time, {"v": value})`` of the key's versions at or before ``until``, oldest first."""
    with store.range(f"{json_key}|", f"{json_key}|{until:0{WIDTH}d}~") as it:
        return [(int(k[len(json_key) + 1:]), held) for k, held in it]


def versioned_table(label: str, spec: VersionedSpec, env: Any) -> Step:
    """The operator that writes a versioned table's store (layout: the module's)."""
    store = env.store(label)
    retention, ts_of = spec.retention, spec.timestamp
    dumps = orjson.dumps
    clock = {"now": -1, "seq": 0}

    def reload() -> None:
        clock.update(now=stored_time(store, STREAM_TIME), seq=store.get(SEQ) or 0)

    reload()
    env.clock.reloads.append(reload)

    def settle(cut: int) -> None:
        """Keep of each key whose versions reach back to ``cut`` only what a lookup at
        ``cut`` or later needs: its latest version at or before ``cut`` (none if that is a
        deletion) and the newer ones."""
        with store.range("x|", f"x|{cut:0{WIDTH}d}~") as it:
            rows = list(it)
        gone = [entry for entry, _ in rows]
        for json_key in dict.fromkeys(json_key for _, json_key in rows):
            old = _versions(store, json_key, cut)
            drop = old[:-1] if old and old[-1][1]["v"] is not None else old
            gone += [f"{json_key}|{t:0{WIDTH}d}" for t, _ in drop]
        store.delete_all(gone)

    def step(key: Any, value: Any, ts: int) -> None:
        t = time_of(label, ts_of, value, ts)
        if t > clock["now"]:
            clock["now"] = t
            store.put(STREAM_TIME, t)
        cut = clock["now"] - retention
        if t < cut:  # older than the history kept: no lookup may see it
            env.late(label)
            return
        json_key = dumps(key).decode()
        clock["seq"] += 1
        store.put(SEQ, clock["seq"])
        store.put(f"{json_key}|{t:0{WIDTH}d}", {"v": value})
        store.put(f"x|{t:0{WIDTH}d}|{clock['seq']:0{WIDTH}d}", json_key)
        if cut >= 0:
            settle(cut)
    return step


def lookup_join(label: str, lookup: Callable[[Any, Any, int], Any],
                joiner: Callable[[Any, Any], Any], left: bool, emit: Step) -> Step:
    """A stream's side of a join with a table: ``joiner(value, lookup(key, value, ts))``,
    sent under the record's key and timestamp; a record the lookup finds nothing for (None)
    is dropped, or joined with None if ``left``."""

    def step(key: Any, value: Any, ts: int) -> None:
        found = lookup(key, value, ts)
        if found is None and not left:
            return
        try:
            out = joiner(value, found)
        except Exception as exc:
            raise OperatorError(label, exc) from exc
        emit(key, out, ts)
    return step


def join_asof(label: str, fn: Any, env: Any, emit: Step) -> Step:
    """A stream's side of an as-of join: each record with its key's latest table version
    at or before its time (none before the table's kept history)."""
    table_name, joiner, left, ts_of, retention = fn
    table = env.store(table_name)
    dumps = orjson.dumps

    def as_of(key: Any, value: Any, ts: int) -> Any:
        t = time_of(label, ts_of, value, ts)
        if t < stored_time(table, STREAM_TIME) - retention:
            return None
        versions = _versions(table, dumps(key).decode(), t)
        return versions[-1][1]["v"] if versions else None

    return lookup_join(label, as_of, joiner, left, emit)

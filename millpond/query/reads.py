"""Answering one query from one task's stores: what the task sees, never a partial page.

Runs on the run loop's thread, between two iterations (:mod:`millpond.query.mailbox`), so
nothing changes while it reads. What a query sees is what the task has processed: the
object cache's entries (a key written since the last write-down included) laid over the
written-down engine, as the task's own ``get`` would see them. Nothing is written: a read
neither fills nor reorders the cache, counts no hit or miss and writes nothing down (a
task's own scan would write the cache's dirty entries down first; a query lays them over
the engine's scan instead).

A get finds the cache's entry by the key as the key serde decodes it, which is the task's
own key unless the task writes keys of another type that serialize alike (a ``str`` under
the ``uuid`` serde, which decodes a ``UUID``): such a key's unwritten value is not seen by a
get until it is written down (at the next commit at the latest); scans see it.

A committed query (``committed=True``) sees the store as of the task's last commit instead:
nothing of the object cache, and the engine with each key written to it since the commit
(cache evictions of the open transaction) read from the snapshot the commit took. Only a
RocksDB store with a changelog has one.

Scans (range, prefix) return at most ``limit`` entries in key order (the order of the
serialized keys, as every store scan) and a continuation token: the serialized key of the
first entry not returned, so the next page starts exactly there and a sequence of pages
covers the range once. A key written or deleted between two pages is seen as it is when
its page is read.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from millpond.query.render import plain
from millpond.serdes import Serde
from millpond.stores.api import BytesStore
from millpond.stores.cached import NOT_CACHED

# An unbounded scan's end: no real key starts with this many 0xff bytes.
_TOP = b"\xff" * 256
TOKEN_PREFIX = "k1."


class Overlay(Protocol):
    """The writes above the engine that a read must see: the object cache."""

    def peek(self, key: Any) -> Any:
        """The cached entry (None: absent) or NOT_CACHED."""
        ...

    def dirty_items(self) -> list[tuple[Any, Any]]:
        """(key, value or None) not written down yet."""
        ...


class PointReader(Protocol):
    """Point reads of a store as it was (a snapshot)."""

    def get(self, key: bytes) -> bytes | None:
        """The value ``key`` had, or None."""
        ...


@dataclass(frozen=True)
class Committed:
    """A store as of its task's last commit: a snapshot taken then, and the keys written to
    the engine since (the only ones whose value may differ from the engine's now)."""

    snapshot: PointReader
    touched: Collection[bytes] | None  # None: too many to follow until the next commit


@dataclass(frozen=True)
class StoreView:
    """One store of one open task, as a query reads it."""

    key_serde: Serde[Any]
    msg_serde: Serde[Any]
    engine: BytesStore  # the written-down state
    cache: Overlay | None = None  # the object cache, if the store has one
    committed: Committed | None = None  # the last commit's state, if the store keeps it


@dataclass(frozen=True)
class Open:
    """The partition's task is open here: its stores."""

    stores: Mapping[str, StoreView]


@dataclass(frozen=True)
class Unavailable:
    """The partition cannot be read here now: why, and its restore's progress if it is
    restoring (store -> records restored, records remaining, seconds)."""

    reason: str
    restore: Mapping[str, Mapping[str, float | int | None]] = field(default_factory=dict)
    assigned: bool = True  # False: not assigned to this process (another may hold it)


class Directory(Protocol):
    """What the runtime offers queries (on its own thread)."""

    def locate(self, partition: int) -> Open | Unavailable:
        """The task of ``partition`` if it is open here, else why not."""
        ...


Kind = Literal["get", "range", "prefix"]


@dataclass(frozen=True)
class Query:
    """One query, its keys and bounds already serialized with the store's key serde."""

    store: str
    partition: int
    kind: Kind
    keys: tuple[bytes, ...] = ()  # get
    start: bytes = b""  # range: first key (inclusive); a continuation moves it
    end: bytes | None = None  # range: end (exclusive); None: no end
    prefix: bytes | None = None  # prefix
    limit: int = 100
    tokens: bool = False  # scans: each entry's serialized key as a token (for merging)
    committed: bool = False  # what the last commit holds, not what the task has processed


@dataclass(frozen=True)
class Answer:
    """An HTTP status and a JSON-ready body."""

    status: int
    body: dict[str, Any]


def token(key: bytes) -> str:
    """The continuation token of a page that stops before ``key``."""
    return TOKEN_PREFIX + base64.urlsafe_b64encode(key).decode()


def untoken(text: str) -> bytes:
    """The key a continuation token resumes at (ValueError if it is not one)."""
    if not text.startswith(TOKEN_PREFIX):
        raise ValueError(f"{text!r:.40} is not a continuation token")
    try:
        return base64.urlsafe_b64decode(text[len(TOKEN_PREFIX):].encode())
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"{text!r:.40} is not a continuation token") from exc


def safely(read: Callable[..., Answer], *args: Any) -> Answer:
    """``read(*args)``, with a read that fails answered 500 instead of raised: it runs on the
    run loop's thread, and a bad read must not stop the job."""
    try:
        return read(*args)
    except Exception as exc:  # noqa: BLE001 - answered, the job carries on
        return Answer(500, {"error": f"{type(exc).__name__}: {exc}"})


def answer_safely(query: Query, directory: Directory) -> Answer:
    """:func:`answer` through :func:`safely`."""
    return safely(answer, query, directory)


def answer(query: Query, directory: Directory) -> Answer:
    """The answer to ``query`` from this process's tasks now."""
    where = directory.locate(query.partition)
    if isinstance(where, Unavailable):
        body: dict[str, Any] = {"error": where.reason, "store": query.store,
                                "partition": query.partition}
        if not where.assigned:
            body["assigned"] = False
        if where.restore:
            body["restore"] = {name: dict(p) for name, p in where.restore.items()}
        return Answer(503, body)
    view = where.stores.get(query.store)
    if view is None:  # the server checked the name against the config: not open here
        return Answer(404, {"error": f"store {query.store!r} is not open in this task",
                            "stores": sorted(where.stores)})
    head = {"store": query.store, "partition": query.partition}
    if query.committed:
        if view.committed is None:
            return Answer(400, {"error": f"store {query.store!r} keeps no committed state "
                                         "to read (a RocksDB store with a changelog does)"})
        if view.committed.touched is None:
            return Answer(503, {"error": f"store {query.store!r} has had too many keys "
                                         "written since the task's last commit to read "
                                         "what it committed; try again after its next "
                                         "commit", "store": query.store,
                                "partition": query.partition})
        cache, committed = None, view.committed
        head["committed"] = True
    else:  # what the task processed: the cache over the engine
        cache, committed = view.cache, None
    if query.kind == "get":
        found, missing = _get(view, query.keys, cache, committed)
        return Answer(200, {**head, "entries": found, "missing": missing})
    entries, after = _scan(view, query, cache, committed)
    return Answer(200, {**head, "entries": entries,
                        "next": token(after) if after is not None else None})


def get_one(store: str, partition: int, kb: bytes, directory: Directory) -> Answer:
    """A one-key get of what the task has processed, answered as one entry: {"store",
    "partition", "key", "value", "found"} (what :func:`answer` and the endpoint's ``single``
    give together). The endpoint's common query, read on a short path: the run loop answers
    it between two batches, when its caches are cold, so every step saved counts twice."""
    where = directory.locate(partition)
    view = where.stores.get(store) if type(where) is Open else None
    if view is None:  # 503 (not open here) or 404 (no such store): the general path's words
        return answer(Query(store, partition, "get", keys=(kb,)), directory)
    key = view.key_serde.from_bytes(kb)
    value = _read(view, kb, key, view.cache, None)
    return Answer(200, {"store": store, "partition": partition, "key": plain(key),
                        "value": plain(value), "found": value is not None})


def _get(view: StoreView, keys: tuple[bytes, ...], cache: Overlay | None,
         committed: Committed | None) -> tuple[list[dict[str, Any]], list[Any]]:
    """The ``keys`` found (entries) and missing, read from ``committed`` (the last commit's
    keys written since) or ``cache`` over the engine."""
    kdec = view.key_serde.from_bytes
    found: list[dict[str, Any]] = []
    missing: list[Any] = []
    for kb in keys:
        key = kdec(kb)
        value = _read(view, kb, key, cache, committed)
        if value is None:
            missing.append(plain(key))
        else:
            found.append({"key": plain(key), "value": plain(value)})
    return found, missing


def _read(view: StoreView, kb: bytes, key: Any, cache: Overlay | None,
          committed: Committed | None) -> Any:
    """The value of ``key`` (serialized: ``kb``) or None, read from ``committed`` or
    ``cache`` over the engine."""
    if committed is not None:
        data = committed.snapshot.get(kb)
        return None if data is None else view.msg_serde.from_bytes(data)
    value: Any = NOT_CACHED
    if cache is not None:
        try:
            value = cache.peek(key)
        except TypeError:  # decodes unhashable (a json list for the task's tuple key)
            value = dict(_overlay(view, kb, kb + b"\x00", cache, None)).get(kb, NOT_CACHED)
    if value is NOT_CACHED:
        data = view.engine.get(kb)
        value = None if data is None else view.msg_serde.from_bytes(data)
    return value


def _bounds(query: Query) -> tuple[bytes, bytes | None, bytes | None]:
    """(start, end, prefix) of the scan in bytes; end None: unbounded."""
    if query.kind == "prefix":
        assert query.prefix is not None
        return max(query.start, query.prefix), _successor(query.prefix), query.prefix
    return query.start, query.end, None


def _successor(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with ``prefix`` (None: there is none)."""
    trimmed = prefix.rstrip(b"\xff")
    return trimmed[:-1] + bytes([trimmed[-1] + 1]) if trimmed else None


def _scan(view: StoreView, query: Query, cache: Overlay | None, committed: Committed | None
          ) -> tuple[list[dict[str, Any]], bytes | None]:
    """Up to ``limit`` entries from the bounds, and the key the next page starts at."""
    start, end, prefix = _bounds(query)
    overlay = _overlay(view, start, end, cache, committed)
    engine = view.engine.range(start, end if end is not None else _TOP)
    kdec, vdec = view.key_serde.from_bytes, view.msg_serde.from_bytes
    out: list[dict[str, Any]] = []
    with engine:
        for kb, value in _merged(engine, overlay, vdec):
            if prefix is not None and not kb.startswith(prefix):
                continue  # cannot happen within the prefix's bounds; kept as a guard
            if len(out) == query.limit:
                return out, kb
            entry = {"key": plain(kdec(kb)), "value": plain(value)}
            if query.tokens:
                entry["token"] = token(kb)
            out.append(entry)
    return out, None


def _overlay(view: StoreView, start: bytes, end: bytes | None, cache: Overlay | None,
             committed: Committed | None) -> list[tuple[bytes, Any]]:
    """The cache's dirty entries within [start, end), by serialized key (committed: the
    snapshot's entries of the keys written since the commit, None for those it lacks)."""
    if committed is not None:
        snapshot, vdec = committed.snapshot, view.msg_serde.from_bytes
        return sorted((kb, None if (data := snapshot.get(kb)) is None else vdec(data))
                      for kb in committed.touched or ()
                      if kb >= start and (end is None or kb < end))
    if cache is None:
        return []
    kenc = view.key_serde.to_bytes
    out = []
    for key, value in cache.dirty_items():
        kb = kenc(key)
        if kb >= start and (end is None or kb < end):
            out.append((kb, value))
    out.sort(key=lambda kv: kv[0])
    return out


def _merged(engine: Iterator[tuple[bytes, bytes]], overlay: list[tuple[bytes, Any]],
            vdec: Any) -> Iterator[tuple[bytes, Any]]:
    """The engine's entries with the overlay laid over them (a None value hides the key),
    in key order, values decoded."""
    i = 0
    for kb, data in engine:
        while i < len(overlay) and overlay[i][0] < kb:
            okb, ovalue = overlay[i]
            i += 1
            if ovalue is not None:
                yield okb, ovalue
        if i < len(overlay) and overlay[i][0] == kb:
            ovalue = overlay[i][1]
            i += 1
            if ovalue is not None:
                yield kb, ovalue
            continue
        yield kb, vdec(data)
    for okb, ovalue in overlay[i:]:
        if ovalue is not None:
            yield okb, ovalue

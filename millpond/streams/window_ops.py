"""Running window operators: each record updates its key's open windows in the operator's
store, then the windows stream time has closed are sent (``final``) and deleted: one range scan
over the store's window keys (ordered by the time they close), or the windows an operator
keeps in memory (tumbling and hopping: those it opened; sessions: the next to close). The layout is
:mod:`millpond.streams.windows`'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from heapq import heappop, heappush, nsmallest
from operator import itemgetter
from struct import Struct
from sys import getsizeof
from typing import Any

import orjson

from millpond.streams.dataflow import Node
from millpond.streams.errors import OperatorError
from millpond.streams.timers import stored_time
from millpond.streams.windows import (
    MAX_TIME,
    STREAM_TIME,
    WIDTH,
    checked_time,
    first_end,
    parse_window_key,
    spec_of,
)
from millpond.streams.windows import time_of as _time_of

Step = Callable[[Any, Any, int], None]
HEAD = 2 * WIDTH + 2  # the length of a window key's "<end>|<start>|"
# An operator's in-memory index of its store (a session operator's heap of close times, a
# time window operator's open windows) holds at most these entries a task, and at most
# INDEX_SHARE of its store's object-cache bound, set aside from that cache (_IndexMemory).
SESSION_HEAP = 50_000  # a session operator's heap: this many (new sessions fill it to 2x)
WINDOW_INDEX = 100_000  # a time window operator's open windows
INDEX_SHARE = 0.5
MIN_INDEX = 1_000  # entries an index may always hold (~128 KB), however small the bound
INDEX_STEP = 4_096  # entries: the reservation follows an index's size in these steps
SESSION_ENTRY = 80  # bytes a heap entry costs until one is measured (a ~20-character key)
# Keys whose sessions a close pass changes, held before they are written back: a pass that
# closes every open session at once (a record far ahead in time) held them all, ~150 B a key
# outside the memory plan (tracemalloc; the 1M-user session bench at
# job.container.memory.mb=128 peaked 156 MiB before, 152 after).
CLOSE_CHUNK = 1_024
WINDOW_ENTRY = 128  # bytes an index entry costs: a dict slot and its key (when not cached)
JOIN_SEQ = "~seq"  # the sequence that tells apart a key's records of one time (joins, sliding)


def _cache_of(store: Any) -> Any:
    """The object cache layer of ``store``'s stack (the layer with ``reserve``, found through
    each layer's ``inner``: streams sits below stores and names no store class), or None."""
    for _ in range(16):  # a stack is a few layers deep
        if store is None or hasattr(store, "reserve"):
            return store
        store = getattr(store, "inner", None)
    return None


class _IndexMemory:
    """The memory of an operator's in-memory index of its store, inside the memory plan: the
    index may take INDEX_SHARE of the store's object-cache bound and what it holds is
    reserved from that cache (``CachedStore.reserve``, in INDEX_STEP steps), so cache and
    index together stay within the bound the plan gave the cache. A store without an object
    cache (object.cache.size=0; or the test driver's plain stores) bounds it by ``most``
    entries only."""

    def __init__(self, store: Any, most: int, per_entry: int, fill: int = 1) -> None:
        self.cache = _cache_of(store)
        self.most = most  # entries, whatever the bound
        self.fill = fill  # the index may grow to this many times its limit between rebuilds
        self.per_entry = per_entry  # bytes an entry costs (an estimate; measured if possible)
        self.charged = 0  # entries reserved from the cache now
        self.cap = most * fill  # entries the index may reach under its last limit

    def limit(self) -> int:
        """Entries the index may hold now (the cache's bound moves as caches come and go)."""
        if self.cache is None:
            return self.most
        room = int(self.cache.max_bytes * INDEX_SHARE) // (self.per_entry * self.fill)
        limit = min(self.most, max(MIN_INDEX, room))
        self.cap = limit * self.fill
        return limit

    def held(self, entries: int) -> None:
        """The index holds ``entries`` now: the cache's reservation follows (in steps)."""
        if self.cache is None or self.charged - INDEX_STEP < entries <= self.charged:
            return
        self.charged = max(entries, min(-(-entries // INDEX_STEP) * INDEX_STEP, self.cap))
        self.cache.reserve(self.charged * self.per_entry)


def _stream_time(store: Any) -> int:
    """The operator's stream time kept in ``store`` (-1: none yet; 0 is a time)."""
    return stored_time(store, STREAM_TIME)


def _idle_ticks(spec: Any, env: Any, clock: dict[str, int], store: Any,
                close: Callable[[], None], grace: int) -> Callable[[], None] | None:
    """With ``spec.idle``: a wall-clock watch (the task's window() calls it) that moves the
    operator's stream time on by the wall time that passed without a record, once that is
    ``idle`` ms, and closes what that closes. Returns what a record calls (it saw one)."""
    if spec.idle is None:
        return None
    wall = env.clock.now
    seen = {"wall": wall()}

    def tick(now_wall: int) -> None:
        quiet = now_wall - seen["wall"]
        if quiet < spec.idle or clock["now"] < 0:
            return
        seen["wall"] = now_wall
        clock["now"] += quiet
        store.put(STREAM_TIME, clock["now"])
        if clock["next"] <= clock["now"] - grace:
            close()

    def record() -> None:
        seen["wall"] = wall()

    env.clock.ticks.append(tick)
    return record


def _reloads(env: Any, clock: dict[str, int], store: Any) -> None:
    """After a skipped record's store writes were undone, the operator's stream time and
    next window end come back from its store (the record may have moved them in memory)."""

    def reload() -> None:
        clock["now"] = _stream_time(store)
        clock["next"] = first_end(store)
        clock["mark"] = -1  # (time_window: the next advance writes stream time again)

    env.clock.reloads.append(reload)


def _observe(t: int, clock: dict[str, int], store: Any,
             saw_record: Callable[[], None] | None) -> int:
    """A record of time ``t`` came: stream time moves on to it (kept in the store); returns
    the stream time."""
    if saw_record is not None:
        saw_record()
    if t > clock["now"]:
        clock["now"] = t
        store.put(STREAM_TIME, t)
    return clock["now"]


def _close_ended(label: str, store: Any, cutoff: int, result: Callable[[Any], Any],
                 emit: Step | None, end_shift: int) -> None:
    """Delete the windows keyed ``<end>|<start>|<key>`` with ``end <= cutoff`` (one range
    scan), first sending each one's result with ``emit`` if given, as
    ``{"start", "end": end - end_shift, "value"}`` timestamped with its last ms (end - 1)."""
    done = []
    head, end, start = "", 0, 0  # the last "<end>|<start>|" parsed (closed windows share it)
    loads = orjson.loads
    with store.range("0", f"{cutoff + 1:0{WIDTH}d}") as it:
        for window, state in it:
            done.append(window)
            if emit is not None:
                if not window.startswith(head) or not head:
                    head = window[:HEAD]
                    end, start = int(window[:WIDTH]), int(window[WIDTH + 1:HEAD - 1])
                key = loads(window[HEAD:])
                try:
                    out = result(state)
                except Exception as exc:
                    raise OperatorError(label, exc) from exc
                emit(key, {"start": start, "end": end - end_shift, "value": out}, end - 1)
    store.delete_all(done)


def _close_indexed(label: str, store: Any, end: int, start: int, windows: list[str],
                   result: Callable[[Any], Any], emit: Step | None) -> None:
    """Delete ``windows``, the store keys of window ``[start, end)`` (sorted: a scan's
    order), first sending each one's result with ``emit`` if given, as
    :func:`_close_ended` does."""
    if emit is not None:
        states = store.get_all(windows)
        loads = orjson.loads
        for window in windows:
            state = states.get(window)
            if state is None:  # (not expected: nothing but a close deletes a window)
                continue
            try:
                out = result(state)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            emit(loads(window[HEAD:]), {"start": start, "end": end, "value": out}, end - 1)
    store.delete_all(windows)


def time_window(node: Node, env: Any, emit: Step) -> Step:
    """A tumbling or hopping window operator: each record updates its key's windows that are
    still open, then the windows whose end plus grace stream time has reached are closed
    (from the operator's index of the windows it opened, else one range scan)."""
    label = node.label
    spec = spec_of(node)
    agg = spec.aggregation
    assert agg is not None
    init, add, result = agg.init, agg.add, agg.result
    every = spec.early_records
    if every is not None:  # the state counts the window's records: [n, state]
        init0, add0, result0 = init, add, result

        def init() -> Any:
            return [0, init0()]

        def add(state: Any, value: Any) -> Any:
            return [state[0] + 1, add0(state[1], value)]

        def result(state: Any) -> Any:
            return result0(state[1])
    size, step_ms, grace, ts_of = spec.size, spec.step, spec.grace, spec.timestamp
    final, late_to, send = spec.mode == "final", spec.late_to, env.send
    store = env.store(label)
    dumps = orjson.dumps
    # "mark": the stream time from which the store's copy must be written again. Only which
    # window ends stream time has passed (less grace) matters (closing, lateness), and ends
    # are size + a multiple of step: the copy is written when stream time passes one, not
    # at every record. A replay from it closes the same windows at the same records.
    clock = {"now": _stream_time(store), "next": first_end(store), "mark": -1}
    _reloads(env, clock, store)
    updated: set[str] = set()  # windows updated since the last early results by time
    offset = size % step_ms
    first_mark = size + grace  # (the first window ends at size)

    # The windows opened since the operator began indexing, end -> their store keys (the
    # strings the object cache holds as keys: an entry costs a dict slot beside them). A
    # close takes its windows from here (hits in the object cache) instead of a range scan
    # that walks every dirty entry and the engine's written-down ones; a window that ends
    # past "scan" and is not here does not exist, so its first put needs no lookup below
    # (put_new). Windows the store may hold that are not here (opened before a restart or
    # a reload, or dropped when the index was full) end at or before "scan": up to there,
    # gets and closes go to the store as before. At most memory.limit() windows.
    index: dict[int, dict[str, None]] = {}
    memory = _IndexMemory(store, WINDOW_INDEX, WINDOW_ENTRY)
    # A stored window holds a time <= the stream time the operator had, which is below the
    # mark its stored stream time gave (max(first_mark, stored + step)): the windows stored
    # end before that plus size. (No stream time stored: no record yet, no window.)
    def unindexed() -> int:
        now = clock["now"]
        return max(first_mark, now + step_ms) + size if now >= 0 else -1

    indexed = {"n": 0, "scan": unindexed(), "limit": memory.limit()}

    def reindex() -> None:  # after a reload: the store's windows may differ from the index
        index.clear()
        indexed.update(n=0, scan=unindexed(), limit=memory.limit())
        memory.held(0)

    env.clock.reloads.append(reindex)
    sender = emit if final else None

    def close() -> None:
        cutoff = clock["now"] - grace  # windows that end at or before it are closed
        ended = sorted([end for end in index if end <= cutoff])
        if indexed["scan"] >= 0:  # the store may hold windows the index does not
            _close_ended(label, store, cutoff, result, sender, 0)
            for end in ended:
                indexed["n"] -= len(index.pop(end))
            if cutoff >= indexed["scan"]:
                indexed["scan"] = -1
        else:
            for end in ended:
                keys = index.pop(end)
                indexed["n"] -= len(keys)
                _close_indexed(label, store, end, end - size, sorted(keys), result, sender)
        memory.held(indexed["n"])
        # The next window end that can exist (ends are size + a multiple of step): a lower
        # bound, no second scan; a close at a bound with no window there finds nothing.
        clock["next"] = cutoff + 1 + (offset - cutoff - 1) % step_ms

    saw_record = _idle_ticks(spec, env, clock, store, close, grace)
    prefixes: dict[int, str] = {}  # window start -> "<end>|<start>|" (the open windows')

    def early(state: Any, start: int, end: int) -> dict[str, Any]:
        try:
            out = result(state)
        except Exception as exc:
            raise OperatorError(label, exc) from exc
        return {"start": start, "end": end, "value": out, "early": True}

    early_ms = spec.early_ms
    if early_ms is not None:
        last = {"at": env.clock.now()}

        def tick(now_wall: int) -> None:
            if now_wall - last["at"] < early_ms:
                return
            last["at"] = now_wall
            for window in sorted(updated):
                state = store.get(window)
                if state is not None:  # (closed meanwhile: its final result went out)
                    end, start, key = parse_window_key(window)
                    emit(key, early(state, start, end), now_wall)
            updated.clear()

        env.clock.ticks.append(tick)

    def step(key: Any, value: Any, ts: int) -> None:
        if ts_of is None:
            t = ts if 0 <= ts <= MAX_TIME else checked_time(label, ts)
        else:
            try:
                t = ts_of(value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            if type(t) is not int or not 0 <= t <= MAX_TIME:
                t = checked_time(label, t)
        if saw_record is not None:
            saw_record()
        now = clock["now"]
        if t > now:
            now = clock["now"] = t
            if t >= clock["mark"]:  # past a window end (less grace) since the last write
                store.put(STREAM_TIME, t)
                clock["mark"] = max(first_mark, grace + offset
                                    + ((t - grace - offset) // step_ms + 1) * step_ms)
        closed = now - grace  # windows ending at or before this are closed
        start = t - t % step_ms
        json_key = dumps(key).decode()
        taken = False
        while start > t - size and start >= 0:  # (no window starts before time 0)
            end = start + size
            if end <= closed:
                break  # this window and every earlier one are closed
            prefix = prefixes.get(start)
            if prefix is None:
                if len(prefixes) > 1000:  # only the open windows' are wanted
                    prefixes.clear()
                prefix = prefixes[start] = f"{end:0{WIDTH}d}|{start:0{WIDTH}d}|"
            window = prefix + json_key
            if end > indexed["scan"]:  # the index knows whether the window exists
                keys = index.get(end)
                if keys is None:
                    keys = index[end] = {}
                if window in keys:
                    state = store.get(window)
                    new = False
                else:
                    state, new = None, True
                    keys[window] = None
                    n = indexed["n"] = indexed["n"] + 1
                    if n > memory.charged:
                        if n > indexed["limit"]:  # full: these are left to a scan
                            indexed.update(scan=max(index), n=0, limit=memory.limit())
                            index.clear()
                        memory.held(indexed["n"])
            else:
                state = store.get(window)
                new = False
            try:
                state = add(init() if state is None else state, value)
                out = result(state) if not final else None
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            if new:
                store.put_new(window, state)
            else:
                store.put(window, state)
            taken = True
            if end < clock["next"]:
                clock["next"] = end
            if not final:
                emit(key, {"start": start, "end": end, "value": out}, ts)
            elif every is not None and state[0] % every == 0:
                emit(key, early(state, start, end), ts)
            if early_ms is not None:
                updated.add(window)
            start -= step_ms
        if not taken:
            env.late(label)
            if late_to is not None:
                send(late_to, key, value, ts)
        if clock["next"] <= closed:
            close()
    return step




def session_window(node: Node, env: Any, emit: Step) -> Step:
    """A session window operator. A key's session ``[start, end]`` spans records less than
    ``gap`` apart (``end``: its last record's time) and closes when stream time reaches
    ``end + gap + grace``; a record within ``gap`` of several sessions merges them (their
    states with the aggregation's ``merge``).

    One store entry per key, ``k|<key>``: its open sessions ``[start, end, state]`` by start
    (a record reads and writes one entry). Sessions close at almost every record, so the
    operator keeps the close times of the sessions that close first in a heap of
    ``<end + gap><start><key>`` bytes: closing pops it, with no store scan per record (a
    scan would force the object cache's dirty entries down, so sessions that open and close
    between two commits would reach RocksDB and the changelog, and in RocksDB it would step
    over the deletes of the sessions closed since the last compaction). The heap holds up
    to SESSION_HEAP entries, fewer when INDEX_SHARE of the store's object-cache bound holds
    fewer (_IndexMemory; new sessions may fill it to twice that): every session that
    closes up to its ``horizon``. One scan of the store (re)builds it at the first record, when
    stream time passes the horizon, after a reload, and when new sessions filled it. A
    merged session's entry stays until its time comes and is skipped then: its key no
    longer lists it."""
    label = node.label
    spec = spec_of(node)
    agg = spec.aggregation
    assert agg is not None and agg.merge is not None
    init, add, result, merge = agg.init, agg.add, agg.result, agg.merge
    gap, grace, ts_of = spec.size, spec.grace, spec.timestamp
    final, late_to, send = spec.mode == "final", spec.late_to, env.send
    store = env.store(label)
    dumps, loads = orjson.dumps, orjson.loads
    # "next": no session closes before it (0: not known, the next record builds the heap)
    clock = {"now": _stream_time(store), "next": 0}
    # Of the sessions closing first: <close time><start> (8 bytes each, big-endian: bytes
    # order as the times) and the key as JSON, as bytes (~72 B an entry, as a string 104)
    heap: list[bytes] = []
    # horizon: every session that closes at or before it is in the heap; built: heap valid
    bounds = {"horizon": -1, "built": False, "limit": SESSION_HEAP}
    memory = _IndexMemory(store, SESSION_HEAP, SESSION_ENTRY, fill=2)

    def reload() -> None:  # after a skipped record's writes were undone
        clock.update(now=_stream_time(store), next=0)
        bounds["built"] = False

    env.clock.reloads.append(reload)

    one, two = Struct(">Q"), Struct(">QQ")  # a time; (close time, start)
    times, unpack_times, unpack_time = two.pack, two.unpack_from, one.unpack_from

    def entries() -> Iterator[bytes]:
        with store.range("k|", "k}") as it:  # ('}' follows '|')
            for skey, sessions in it:
                json_key = skey[2:].encode()
                for s in sessions:
                    yield times(s[1] + gap, s[0]) + json_key

    def build() -> None:
        limit = bounds["limit"] = memory.limit()
        first = nsmallest(limit + 1, entries())  # sorted: a valid heap
        horizon = MAX_TIME
        if len(first) > limit:  # the rest close at or after first[-1]
            last = unpack_time(first[-1])[0]
            horizon = last - 1
            first = [e for e in first if unpack_time(e)[0] <= horizon]
            if not first:  # more than the limit of sessions close at one time
                horizon = last
                first = sorted(e for e in entries() if unpack_time(e)[0] == last)
        heap[:] = first
        bounds.update(horizon=horizon, built=True)
        if first:  # what an entry costs: its bytes and the list's slot
            sample = first[:: max(1, len(first) // 64)]
            memory.per_entry = sum(map(getsizeof, sample)) // len(sample) + 8
        memory.held(len(first))

    def close() -> None:
        cutoff = clock["now"] - grace
        below = one.pack(cutoff + 1)  # entries before it close
        get = store.get
        changed: dict[bytes, list[list[Any]]] = {}  # key -> its sessions left (new lists)

        def write_back() -> None:  # at most CLOSE_CHUNK keys held: a later get reads them
            for json_key, sessions in changed.items():
                if sessions:
                    store.put(f"k|{json_key.decode()}", sessions)
                else:
                    store.delete(f"k|{json_key.decode()}")
            changed.clear()

        while True:
            if not bounds["built"]:
                build()
            while heap and heap[0] < below:
                if len(changed) >= CLOSE_CHUNK:
                    write_back()
                entry = heappop(heap)
                close_at, start = unpack_times(entry)
                json_key = entry[16:]
                sessions = changed.get(json_key)
                if sessions is None:
                    sessions = get(f"k|{json_key.decode()}") or []
                end = close_at - gap
                at = next((i for i, s in enumerate(sessions) if s[0] == start and s[1] == end),
                          -1)
                if at < 0:
                    continue  # merged into a later session
                changed[json_key] = sessions[:at] + sessions[at + 1:]
                if final:
                    try:
                        out = result(sessions[at][2])
                    except Exception as exc:
                        raise OperatorError(label, exc) from exc
                    emit(loads(json_key), {"start": start, "end": end, "value": out}, end)
            write_back()
            memory.held(len(heap))
            if cutoff <= bounds["horizon"]:
                break
            bounds["built"] = False  # sessions past the horizon may close too: rebuild
        clock["next"] = unpack_time(heap[0])[0] if heap else bounds["horizon"] + 1

    saw_record = _idle_ticks(spec, env, clock, store, close, grace)

    def step(key: Any, value: Any, ts: int) -> None:
        t = _time_of(label, ts_of, value, ts)
        now = _observe(t, clock, store, saw_record)
        closed = now - grace
        json_key = dumps(key)
        skey = f"k|{json_key.decode()}"
        sessions: list[list[Any]] = store.get(skey) or []
        joined = [s for s in sessions if s[0] - gap < t < s[1] + gap]
        if not joined and t + gap <= closed:
            env.late(label)
            if late_to is not None:
                send(late_to, key, value, ts)
        else:
            try:
                if joined:
                    state = joined[0][2]
                    for s in joined[1:]:
                        state = merge(state, s[2])
                    state = add(state, value)
                else:
                    state = add(init(), value)
                out = None if final else result(state)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            start = min(t, joined[0][0]) if joined else t
            end = max(t, joined[-1][1]) if joined else t
            if len(joined) == len(sessions):
                store.put(skey, [[start, end, state]])
            else:
                kept = [s for s in sessions if s not in joined]
                store.put(skey, sorted([*kept, [start, end, state]], key=itemgetter(0)))
            close_at = end + gap
            if (bounds["built"] and close_at <= bounds["horizon"]
                    and not (len(joined) == 1 and joined[0][0] == start
                             and joined[0][1] == end)):
                if len(heap) >= 2 * bounds["limit"]:  # filled by new sessions: rebuild
                    bounds["built"] = False
                    clock["next"] = 0
                else:
                    heappush(heap, times(close_at, start) + json_key)
                    if len(heap) > memory.charged:
                        memory.held(len(heap))
            if close_at < clock["next"]:
                clock["next"] = close_at
            if not final:
                emit(key, {"start": start, "end": end, "value": out}, ts)
        if clock["next"] <= closed:
            close()
    return step


def sliding_window(node: Node, env: Any, emit: Step) -> Step:
    """A sliding window operator. Each distinct time ``t`` of a key's records defines its
    window ``[t - size, t]`` (both ends included), holding the key's records at those
    times; it closes when stream time passes ``t + grace``. A record at ``r`` updates its
    key's windows ending in ``[r, r + size]`` and creates its own from the key's records.

    Store layout: window ``[t - size, t]`` is ``<t + 1>|<max(0, t - size)>|<key>`` (its
    state: the aggregation's; ordered by when it closes, as the other windows), the key's
    records ``r|<key>|<time>|<seq>`` (a new window folds them) with the expiry index
    ``x|<time>|<seq>``. A record is dropped from the store once stream time passes
    ``time + size + grace`` (no open window can take it then), so closed windows and
    expired records leave nothing behind."""
    label = node.label
    spec = spec_of(node)
    agg = spec.aggregation
    assert agg is not None
    init, add, result = agg.init, agg.add, agg.result
    size, grace, ts_of = spec.size, spec.grace, spec.timestamp
    final, late_to, send = spec.mode == "final", spec.late_to, env.send
    store = env.store(label)
    dumps = orjson.dumps
    clock = {"now": -1, "next": 0, "kept": 0, "seq": 0}

    def first_kept() -> int:
        with store.range("x|", "x}") as it:
            for expiry, _ in it:
                return int(expiry[2:2 + WIDTH])
        return MAX_TIME + 1

    def reload() -> None:
        clock.update(now=_stream_time(store), next=first_end(store),
                     kept=first_kept(), seq=store.get(JOIN_SEQ) or 0)

    reload()
    env.clock.reloads.append(reload)

    def fold(state: Any, value: Any) -> Any:
        try:
            return add(init() if state is None else state, value)
        except Exception as exc:
            raise OperatorError(label, exc) from exc

    def out(state: Any) -> Any:
        try:
            return result(state)
        except Exception as exc:
            raise OperatorError(label, exc) from exc

    def close() -> None:
        cutoff = clock["now"] - grace  # windows whose t + 1 is at or before it are closed
        _close_ended(label, store, cutoff, result, emit if final else None, 1)
        clock["next"] = first_end(store)
        cut = cutoff - size  # records before it are in no open window
        if clock["kept"] < cut:
            with store.range("x|", f"x|{cut:0{WIDTH}d}") as it:
                rows = list(it)
            store.delete_all([k for expiry, json_key in rows
                              for k in (expiry, f"r|{json_key}|{expiry[2:]}")])
            clock["kept"] = first_kept()

    def step(key: Any, value: Any, ts: int) -> None:
        t = _time_of(label, ts_of, value, ts)
        now = _observe(t, clock, store, None)
        if t + grace < now:  # its own window has closed
            env.late(label)
            if late_to is not None:
                send(late_to, key, value, ts)
        else:
            json_key = dumps(key).decode()
            clock["seq"] += 1
            store.put(JOIN_SEQ, clock["seq"])
            stamp = f"{t:0{WIDTH}d}|{clock['seq']:0{WIDTH}d}"
            store.put(f"r|{json_key}|{stamp}", value)
            store.put(f"x|{stamp}", json_key)
            clock["kept"] = min(clock["kept"], t)
            lo, hi = max(0, t - size), min(MAX_TIME - 1, t + size)
            with store.range(f"r|{json_key}|{lo:0{WIDTH}d}",
                             f"r|{json_key}|{hi:0{WIDTH}d}|~") as it:
                kept = [(int(k.rsplit("|", 2)[1]), v) for k, v in it]
            ends = sorted({at for at, _ in kept if at >= t})
            for end in ends:  # the windows the record falls in, its own first
                window = f"{end + 1:0{WIDTH}d}|{max(0, end - size):0{WIDTH}d}|{json_key}"
                state = store.get(window)
                if state is None and end == t:  # a new window: fold the records in it
                    for at, held in kept:
                        if at <= t:
                            state = fold(state, held)
                elif state is not None:
                    state = fold(state, value)
                else:
                    continue  # (cannot be: a window ending at or after t is open)
                store.put(window, state)
                if not final:
                    emit(key, {"start": max(0, end - size), "end": end, "value": out(state)},
                         ts)
            clock["next"] = min(clock["next"], t + 1)
        if clock["next"] <= now - grace or clock["kept"] < now - grace - size:
            close()
    return step


def count_window(node: Node, env: Any, emit: Step) -> Step:
    """A count window operator: per key (its store key: the key as JSON), the index of its
    next record and its open windows ``[first index, first timestamp, state]``; a window
    that has ``size`` records is done (sent if ``final``) and dropped, and a key with no open
    window at a step boundary is deleted, so a quiet key leaves nothing behind."""
    label = node.label
    spec = spec_of(node)
    agg = spec.aggregation
    assert agg is not None
    init, add, result = agg.init, agg.add, agg.result
    size, step_n, final = spec.size, spec.step, spec.mode == "final"
    store = env.store(label)
    dumps = orjson.dumps

    def step(key: Any, value: Any, ts: int) -> None:
        json_key = dumps(key).decode()
        st = store.get(json_key) or {"i": 0, "w": []}
        i, open_windows = st["i"], st["w"]
        if i % step_n == 0:
            open_windows.append([i, ts, init()])
        kept = []
        for window in open_windows:
            first, first_ts, state = window
            try:
                state = add(state, value)
                out = result(state) if not final or i - first + 1 == size else None
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            if final:
                if i - first + 1 == size:
                    emit(key, {"start": first_ts, "end": ts, "value": out}, ts)
                    continue
            else:
                emit(key, {"start": first_ts, "end": ts, "value": out}, ts)
                if i - first + 1 == size:
                    continue
            kept.append([first, first_ts, state])
        if not kept and (i + 1) % step_n == 0:
            store.delete(json_key)
        else:
            store.put(json_key, {"i": i + 1, "w": kept})
    return step


class _JoinState:
    """What both sides of a window join share: the store, each side's stream time, the
    sequence, and the earliest buffered time of each side."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.now: dict[str, int] = {}
        self.seq = 0
        self.next: dict[str, int] = {}
        self.reload()

    def reload(self) -> None:
        """Read both sides' stream time, the sequence and the earliest buffered times back
        from the store (at start, and after a skipped record's writes were undone); the
        dicts are updated in place, as the sides' steps hold them."""
        self.now.update({side: stored_time(self.store, f"{STREAM_TIME}|{side}")
                         for side in "LR"})
        self.seq = self.store.get(JOIN_SEQ) or 0
        self.next.update({side: self.first(side) for side in "LR"})

    def first(self, side: str) -> int:
        with self.store.range(f"x|{side}|", f"x|{side}}}") as it:
            for expiry, _ in it:
                return int(expiry[4:4 + WIDTH])
        return MAX_TIME + 1



def window_join(node: Node, env: Any, emit: Step, shared: dict[int, Any]) -> Step:
    """One side of a window or interval join (``node.kind``: ``window_join`` is the left
    side, ``window_join_right`` the right). Each record waits in the store under
    ``<key as JSON>|<L or R>|<time>|<seq>`` (``{"v": value, "m": matched}``), indexed for
    expiry by ``x|<side>|<time>|<seq>``. A record of a side at ``t`` joins the other side's
    records of its key at times in ``[t + lo, t + hi]`` (one range scan), where
    ``(lo, hi)`` is ``(lower, upper)`` for the left side and ``(-upper, -lower)`` for the
    right (a window join within ``w``: ``(-w, w)`` for both).

    Each side has its own stream time, so the result does not depend on how the two inputs
    interleave (as long as each is out of order by at most ``grace``): records still to come
    from this side are at ``now - grace`` or later, so they reach the other side's records at
    ``now - grace + lo`` or later; the other side's earlier records expire (sent unmatched for
    left and outer joins). Likewise a record is kept only while ``t + hi + grace`` has not
    passed the other side's stream time. A record more than ``grace`` behind its own side's
    stream time is late (its partners may have expired)."""
    spec = node.fn
    name = node.name or node.label
    side, other = ("L", "R") if node.kind == "window_join" else ("R", "L")
    state = shared.get(id(spec))
    if state is None:
        state = shared[id(spec)] = _JoinState(env.store(name))
        env.clock.reloads.append(state.reload)
    store, grace, fn, ts_of = state.store, spec.grace, spec.fn, spec.timestamp
    lo_off, hi_off = spec.reach(side)
    unmatched_sent = spec.how in ("left", "outer") if other == "L" else spec.how == "outer"
    late_to, send = spec.late_to, env.send
    dumps = orjson.dumps
    now = state.now

    def joined(left: Any, right: Any) -> Any:
        try:
            return fn(left, right)
        except Exception as exc:
            raise OperatorError(name, exc) from exc

    def expire_other() -> None:
        cut = now[side] - grace + lo_off  # the other side's records before it cannot match
        with store.range(f"x|{other}|", f"x|{other}|{cut:0{WIDTH}d}") as it:
            rows = list(it)
        gone = []
        for expiry, json_key in rows:
            _, _, t, seq = expiry.split("|")
            record = f"{json_key}|{other}|{t}|{seq}"
            held = store.get(record)
            gone += [expiry, record]
            if held is None or held["m"] or not unmatched_sent:
                continue
            pair = joined(held["v"], None) if other == "L" else joined(None, held["v"])
            emit(orjson.loads(json_key), pair, int(t))
        store.delete_all(gone)
        state.next[other] = state.first(other)

    def step(key: Any, value: Any, ts: int) -> None:
        t = _time_of(name, ts_of, value, ts)
        if t > now[side]:
            now[side] = t
            store.put(f"{STREAM_TIME}|{side}", t)
        elif t + grace < now[side]:
            env.late(name)
            if late_to is not None:
                send(late_to, key, value, ts)
            return
        json_key = dumps(key).decode()
        lo, hi = max(0, t + lo_off), min(MAX_TIME, t + hi_off)
        matches: list[tuple[str, Any]] = []
        if lo <= hi:  # ("~" sorts after "|<seq>": hi is in the range)
            with store.range(f"{json_key}|{other}|{lo:0{WIDTH}d}",
                             f"{json_key}|{other}|{hi:0{WIDTH}d}|~") as it:
                matches = list(it)
        for record, held in matches:
            t_other = int(record.rsplit("|", 2)[1])
            pair = joined(value, held["v"]) if side == "L" else joined(held["v"], value)
            emit(key, pair, max(t, t_other))
            if not held["m"]:
                store.put(record, {"v": held["v"], "m": True})
        if t + hi_off + grace >= now[other]:  # else nothing still to come can match it
            state.seq += 1
            store.put(JOIN_SEQ, state.seq)
            stamp = f"{t:0{WIDTH}d}|{state.seq:0{WIDTH}d}"
            store.put(f"{json_key}|{side}|{stamp}", {"v": value, "m": bool(matches)})
            store.put(f"x|{side}|{stamp}", json_key)
            state.next[side] = min(state.next[side], t)
        elif not matches and (spec.how == "outer" or (side == "L" and spec.how == "left")):
            pair = joined(value, None) if side == "L" else joined(None, value)
            emit(key, pair, t)
        if state.next[other] < now[side] - grace + lo_off:
            expire_other()
    return step

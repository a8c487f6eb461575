"""Timers of a keyed ``process`` operator, kept in a store beside its state.

A timer is ``(time, key)`` in one of two domains: event time (it fires once the task's stream
time, the largest record timestamp it has seen, reaches it) or processing time (once the wall
clock does). Timers live in the operator's timer store (``<name>-timers``: string keys, JSON
values, its own changelog), so they are committed with the state and the input offsets they
belong to, move with the task on a rebalance and come back on restore. Firing deletes the
timer in the same transaction as what the callback did: under ``exactly-once`` a timer fires
once in effect, under ``effectively-once`` the state is exact as for records.

Keys order by time: ``e|<time, 16 digits>|<key as JSON>`` (``p|`` for processing time), so
the due timers are one range scan. Only the earliest time is held in memory; the stream time
is kept in the store too (``s|stream-time``), so a restarted task resumes the clock it
committed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import orjson

from millpond.streams.errors import DataflowError

EVENT, PROCESSING = "e", "p"
STREAM_TIME = "s|stream-time"
MAX_TIME = 10**16 - 1
_WIDTH = 16
NEVER = MAX_TIME + 1
_BATCH = 1000  # due timers read per scan


def stored_time(store: Any, key: str) -> int:
    """A stream time an operator keeps in ``store`` under ``key``: -1 if none yet (0 is a
    time, not "none": ``store.get(key) or -1`` would read it back as -1)."""
    now = store.get(key)
    return -1 if now is None else int(now)


class Timer(NamedTuple):
    """A timer that fired: its ``time`` (ms) and whether it is a processing-time one."""

    time: int
    processing_time: bool = False


def timer_key(domain: str, time: int, key: Any) -> str:
    """The store key of a timer (time-ordered within its domain)."""
    if not isinstance(time, int) or isinstance(time, bool) or not 0 <= time <= MAX_TIME:
        raise DataflowError(f"a timer's time must be an int of milliseconds in 0..{MAX_TIME}, "
                            f"got {time!r}")
    return f"{domain}|{time:0{_WIDTH}d}|{orjson.dumps(key).decode()}"


def timers_store(name: str) -> str:
    """The name of the timer store of process operator ``name``."""
    return f"{name}-timers"


class Timers:
    """One operator's timers in one task, over its timer store (``get/put/delete/range``)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.stream_time: int = -1
        self._next: dict[str, int] = {}
        self._set_during = NEVER  # the earliest timer set while due() hands timers out
        self.reload()

    def reload(self) -> None:
        """Read the stream time and the earliest timers back from the store (at start, and
        after a skipped record's writes were undone)."""
        self.stream_time = stored_time(self._store, STREAM_TIME)
        self._next = {EVENT: self._first(EVENT), PROCESSING: self._first(PROCESSING)}
        self._set_during = NEVER

    def _first(self, domain: str) -> int:
        with self._store.range(f"{domain}|", f"{domain}}}") as it:
            for _, (time, _key) in it:
                return int(time)
        return NEVER

    def set(self, domain: str, time: int, key: Any) -> None:
        """Set a timer (setting one that is set already changes nothing)."""
        self._store.put(timer_key(domain, time, key), [time, key])
        if time < self._next[domain]:
            self._next[domain] = time
        if time < self._set_during:
            self._set_during = time

    def cancel(self, domain: str, time: int, key: Any) -> None:
        """Remove a timer if it is set (the earliest time in memory may then be early: the
        next :meth:`due` finds nothing and looks again)."""
        self._store.delete(timer_key(domain, time, key))

    def advance(self, timestamp: int) -> None:
        """The task saw a record of ``timestamp``: stream time moves forward to it."""
        self.stream_time = timestamp
        self._store.put(STREAM_TIME, timestamp)

    def next(self, domain: str) -> int:
        """The earliest time a timer of ``domain`` may be due (:data:`NEVER` if none)."""
        return self._next[domain]

    def due(self, domain: str, now: int) -> Iterator[tuple[int, Any]]:
        """Pop the timers of ``domain`` due at ``now`` in time order, deleting each from the
        store before it is handed out; timers set meanwhile at or before ``now`` come too."""
        while self._next[domain] <= now:
            batch = []
            with self._store.range(f"{domain}|", f"{domain}|{now + 1:0{_WIDTH}d}") as it:
                for key, (time, user_key) in it:
                    batch.append((key, time, user_key))
                    if len(batch) >= _BATCH:
                        break
            if not batch:
                self._next[domain] = self._first(domain)
                return
            self._set_during = NEVER
            for key, time, user_key in batch:
                if self._set_during <= time:
                    break  # a timer fired set one due before this one: scan again
                self._store.delete(key)
                yield time, user_key
            else:
                if len(batch) < _BATCH and self._set_during == NEVER:
                    self._next[domain] = self._first(domain)
        self._set_during = NEVER

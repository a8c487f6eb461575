"""Time windows over a keyed stream: tumbling and hopping, any aggregation, final or current
results, a grace period and a policy for late records.

A window ``[start, end)`` of a key holds one aggregation state in the operator's store under
``<end, 16 digits>|<start, 16 digits>|<key as JSON>``, so the store is ordered by window end:
closing windows is one range scan from the start to the closing time (or, for the windows a
tumbling or hopping operator opened since it started, a walk of its in-memory index of them),
and a closed window leaves nothing behind. The operator's stream time (the largest timestamp it has seen) is kept
in the same store (``~stream-time``, after every window), so a replay after a crash closes the
same windows at the same records. (Tumbling and hopping operators write it when it passes a
window end, less grace: only which ends it has passed decides what closes and what is late.)

A window closes when stream time reaches ``end + grace``; a record whose windows are all closed
is late: counted, and dropped or sent to the ``late_to`` topic. Sliding windows key their
windows by the time they close instead, so closing is the same scan; session windows keep
one entry per key and the next close times in memory (see their operators in
:mod:`millpond.streams.window_ops`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from millpond.streams import aggregations as aggs
from millpond.streams.aggregations import Aggregation
from millpond.streams.errors import DataflowError, OperatorError

if TYPE_CHECKING:
    from millpond.streams.dataflow import Node, Stream

STREAM_TIME = "~stream-time"  # sorts after every window key (digits)
WIDTH = 16
MAX_TIME = 10**WIDTH - 1


@dataclass
class WindowSpec:
    """What a window operator does: its windows, aggregation, emit mode and late policy."""

    kind: str  # tumbling, hopping, sliding, session (size: the gap), count (size, step: records)
    size: int
    step: int
    grace: int
    timestamp: Callable[[Any], int] | None
    late_to: str | None
    aggregation: Aggregation | None = None
    mode: str | None = None  # final, current (None until chosen)
    idle: int | None = None  # ms of wall clock without a record that move stream time on
    early_records: int | None = None  # final(): also an early result every N records
    early_ms: int | None = None  # final(): also early results of updated windows every T ms


def time_of(label: str, ts_of: Callable[[Any], int] | None, value: Any, ts: int) -> int:
    """A record's event time: ``ts_of(value)``, else its timestamp ``ts``; an error names
    operator ``label``."""
    try:
        t = ts if ts_of is None else ts_of(value)
    except Exception as exc:
        raise OperatorError(label, exc) from exc
    return checked_time(label, t)


def checked_time(label: str, t: Any) -> int:
    """``t`` if it is a record time (an int of ms in 0..MAX_TIME), else an error naming
    operator ``label``."""
    if not isinstance(t, int) or not 0 <= t <= MAX_TIME:
        raise OperatorError(label, ValueError(
            f"a record's time must be an int of ms in 0..{MAX_TIME}, got {t!r}"))
    return t


def first_end(store: Any, lower: int = 0) -> int:
    """The earliest window end in ``store`` (past :data:`MAX_TIME` if it has no window), at
    or after ``lower`` (an operator that knows no window ends before it says so: the scan
    then seeks past the deletes of the windows it closed, which RocksDB would otherwise step
    over one by one until a compaction drops them)."""
    # window keys start with digits (':' follows '9')
    with store.range(f"{lower:0{WIDTH}d}" if lower else "0", ":") as it:
        for window, _ in it:
            return int(window[:WIDTH])
    return MAX_TIME + 1


def parse_window_key(store_key: str) -> tuple[int, int, Any]:
    """``(end, start, key)`` of a store key made by :func:`window_key`."""
    end, start, key = store_key.split("|", 2)
    return int(end), int(start), orjson.loads(key)


def _positive(what: str, value: Any, zero_ok: bool = False) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero_ok else 1):
        raise DataflowError(f"{what} must be an int of milliseconds {'>= 0' if zero_ok else '> 0'}"
                            f", got {value!r}")
    return value


class WindowedStream:
    """A stream cut into time windows: aggregate it (each method names the window's store),
    then say when results go out with ``.final()`` or ``.current()``."""

    def __init__(self, stream: Stream, spec: WindowSpec) -> None:
        self._stream = stream
        self._spec = spec

    def aggregate(self, name: str, aggregation: Aggregation) -> WindowedAggregate:
        """Fold each key's values in each window with ``aggregation`` (over session windows
        it needs a ``merge``: the built-in ones have one, ``fold`` takes one)."""
        if self._spec.kind == "session" and aggregation.merge is None:
            raise DataflowError(f"session window {name!r}: its aggregation needs a merge(a, b) "
                                "of two states (a record can join two sessions): give fold "
                                "a merge=, or use an aggregation that has one")
        spec = WindowSpec(**{**self._spec.__dict__, "aggregation": aggregation})
        stream = self._stream._add("window", spec, name)
        return WindowedAggregate(stream, spec, name)

    def count(self, name: str) -> WindowedAggregate:
        """How many values each key has in each window."""
        return self.aggregate(name, aggs.count())

    def sum(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> WindowedAggregate:
        """The sum of ``by(value)`` per key and window."""
        return self.aggregate(name, aggs.total(by))

    def min(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> WindowedAggregate:
        """The smallest ``by(value)`` per key and window."""
        return self.aggregate(name, aggs.minimum(by))

    def max(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> WindowedAggregate:
        """The largest ``by(value)`` per key and window."""
        return self.aggregate(name, aggs.maximum(by))

    def mean(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> WindowedAggregate:
        """The mean of ``by(value)`` per key and window."""
        return self.aggregate(name, aggs.mean(by))

    def reduce(self, name: str, fn: Callable[[Any, Any], Any]) -> WindowedAggregate:
        """``fn(accumulated, value)`` per key and window, from the window's first value."""
        return self.aggregate(name, aggs.reduce(fn))

    def fold(self, name: str, init: Callable[[], Any],
             add: Callable[[Any, Any], Any]) -> WindowedAggregate:
        """``add(state, value)`` per key and window, from ``init()``."""
        return self.aggregate(name, aggs.fold(init, add))

    def collect(self, name: str, by: Callable[[Any], Any] = aggs._identity) -> WindowedAggregate:
        """Every ``by(value)`` of each key's window, in arrival order."""
        return self.aggregate(name, aggs.collect(by))

    def agg(self, name: str, **named: Aggregation) -> WindowedAggregate:
        """Several aggregations per key and window in one store (a dict of results)."""
        if not named:
            raise DataflowError(f"agg {name!r} needs at least one aggregation")
        return self.aggregate(name, aggs.several(named))


class WindowedAggregate:
    """A windowed aggregation; ``final()`` or ``current()`` makes it a stream of results
    ``{"start": ms, "end": ms, "value": result}`` under the record's key."""

    def __init__(self, stream: Stream, spec: WindowSpec, name: str) -> None:
        self._stream, self._spec, self._name = stream, spec, name

    def _mode(self, mode: str) -> Stream:
        if self._spec.mode is not None:
            raise DataflowError(f"window {self._name!r}: .final() or .current(), once")
        self._spec.mode = mode
        return self._stream

    def final(self, *, early_every_records: int | None = None,
              early_every_ms: int | None = None) -> Stream:
        """One result per key and window, when the window closes (stream time reaches its end
        plus the grace period); its timestamp is the window's last millisecond. Under
        ``exactly-once``, each appears once for a ``read_committed`` reader.

        Early results (Samza's early triggers; tumbling and hopping windows): with
        ``early_every_records``, a window's result so far after every N-th record it takes;
        with ``early_every_ms``, the results of the windows updated since, every T ms of the
        wall clock. Early results carry ``"early": True``; the final one still follows."""
        if early_every_records is not None or early_every_ms is not None:
            if self._spec.kind not in ("tumbling", "hopping"):
                raise DataflowError(f"window {self._name!r}: early results are for tumbling "
                                    "and hopping windows")
            if early_every_records is not None:
                self._spec.early_records = _positive("early_every_records",
                                                     early_every_records)
            if early_every_ms is not None:
                self._spec.early_ms = _positive("early_every_ms", early_every_ms)
        return self._mode("final")

    def current(self) -> Stream:
        """The window's result after every record it takes (its timestamp: the record's)."""
        return self._mode("current")


def spec_of(node: Node) -> WindowSpec:
    """The window spec of a window operator node, its emit mode chosen."""
    spec: WindowSpec = node.fn
    if spec.mode is None:
        raise DataflowError(f"window {node.label!r}: say when its results go out: "
                            ".final() (once per window, when it closes) or .current() (every "
                            "update)")
    return spec


def tumbling(stream: Stream, size_ms: int, grace_ms: int,
             timestamp: Callable[[Any], int] | None, late_to: str | None,
             idle_close_ms: int | None = None) -> WindowedStream:
    size = _positive("a tumbling window's size", size_ms)
    return WindowedStream(stream, WindowSpec("tumbling", size, size,
                                             _positive("grace_ms", grace_ms, True),
                                             timestamp, late_to, idle=_idle(idle_close_ms)))


def session(stream: Stream, gap_ms: int, grace_ms: int,
            timestamp: Callable[[Any], int] | None, late_to: str | None,
            idle_close_ms: int | None = None) -> WindowedStream:
    gap = _positive("a session window's gap", gap_ms)
    return WindowedStream(stream, WindowSpec("session", gap, gap,
                                             _positive("grace_ms", grace_ms, True),
                                             timestamp, late_to, idle=_idle(idle_close_ms)))


def sliding(stream: Stream, size_ms: int, grace_ms: int,
            timestamp: Callable[[Any], int] | None, late_to: str | None) -> WindowedStream:
    size = _positive("a sliding window's size", size_ms)
    return WindowedStream(stream, WindowSpec("sliding", size, size,
                                             _positive("grace_ms", grace_ms, True),
                                             timestamp, late_to))


def _idle(ms: int | None) -> int | None:
    return None if ms is None else _positive("idle_close_ms", ms)


def count_window(stream: Stream, size: int, step: int) -> WindowedStream:
    n = _positive("a count window's size (records)", size)
    m = _positive("a count window's step (records)", step)
    if m > n:
        raise DataflowError(f"a hopping count window's step ({m}) must not exceed its size "
                            f"({n}): records between windows would belong to none")
    return WindowedStream(stream, WindowSpec("count", n, m, 0, None, None))


def hopping(stream: Stream, size_ms: int, step_ms: int, grace_ms: int,
            timestamp: Callable[[Any], int] | None, late_to: str | None,
            idle_close_ms: int | None = None) -> WindowedStream:
    size = _positive("a hopping window's size", size_ms)
    step = _positive("a hopping window's step", step_ms)
    if step > size:
        raise DataflowError(f"a hopping window's step ({step} ms) must not exceed its size "
                            f"({size} ms): records between windows would belong to none")
    return WindowedStream(stream, WindowSpec("hopping", size, step,
                                             _positive("grace_ms", grace_ms, True),
                                             timestamp, late_to, idle=_idle(idle_close_ms)))


@dataclass(eq=False)
class JoinSpec:
    """A stream-stream join over an interval (Flink's interval join): a left record at ``t``
    and a right record of the same key at a time in ``[t + lower, t + upper]`` are joined by
    ``fn(left, right)``. A window join within ``w`` is the interval ``[-w, +w]``. Each side's
    records wait in the store until the other side's stream time says nothing still to come
    can match them (see :func:`millpond.streams.window_ops.window_join`)."""

    lower: int
    upper: int
    grace: int
    fn: Callable[[Any, Any], Any]
    how: str  # inner, left, outer
    timestamp: Callable[[Any], int] | None
    late_to: str | None
    kind: str = "window"  # window (window_join) or interval (interval_join): for describe

    def reach(self, side: str) -> tuple[int, int]:
        """The offsets ``(lo, hi)`` such that a record of ``side`` (``L`` or ``R``) at ``t``
        matches the other side's records at times in ``[t + lo, t + hi]``."""
        return (self.lower, self.upper) if side == "L" else (-self.upper, -self.lower)


def _check_join(op: str, fn: Callable[[Any, Any], Any], how: str) -> None:
    if how not in ("inner", "left", "outer"):
        raise DataflowError(f"{op}: how={how!r}; it is 'inner', 'left' or 'outer'")
    if not callable(fn):
        raise DataflowError(f"{op}: fn must be a function of (left, right)")


def window_join(within_ms: int, grace_ms: int, fn: Callable[[Any, Any], Any], how: str,
                timestamp: Callable[[Any], int] | None, late_to: str | None) -> JoinSpec:
    _check_join("window_join", fn, how)
    within = _positive("within_ms", within_ms, True)
    return JoinSpec(-within, within, _positive("grace_ms", grace_ms, True), fn, how,
                    timestamp, late_to)


def _offset(what: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_TIME:
        raise DataflowError(f"{what} must be an int of milliseconds (negative: before the "
                            f"left record), got {value!r}")
    return value


def interval_join(name: str, lower_ms: int, upper_ms: int, grace_ms: int,
                  fn: Callable[[Any, Any], Any], how: str,
                  timestamp: Callable[[Any], int] | None, late_to: str | None) -> JoinSpec:
    op = f"interval_join {name!r}"
    _check_join(op, fn, how)
    lower, upper = _offset(f"{op}: lower_ms", lower_ms), _offset(f"{op}: upper_ms", upper_ms)
    if lower > upper:
        raise DataflowError(f"{op}: lower_ms ({lower}) must not exceed upper_ms ({upper}): "
                            "the interval [t + lower, t + upper] would be empty")
    return JoinSpec(lower, upper, _positive(f"{op}: grace_ms", grace_ms, True), fn, how,
                    timestamp, late_to, kind="interval")

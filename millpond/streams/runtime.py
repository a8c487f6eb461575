"""Running a dataflow: each source's operator tree fused into one function per record.

:func:`bind` turns a :class:`~millpond.streams.dataflow.Node` tree into nested closures
``step(key, value)``: each calls its user function and hands the result straight to the next
(no envelope, no per-operator dispatch). :class:`DataflowTask` is the StreamTask that runs an
app's sources inside millpond's ordinary tasks, so commits, transactions, restore, fencing
and the error policy are the runtime's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from time import monotonic, time_ns
from typing import Any, Protocol

from millpond.api import (
    IncomingMessageEnvelope,
    MessageCollector,
    StreamTask,
    TaskContext,
    TaskCoordinator,
)
from millpond.streams import asof
from millpond.streams.aggregations import Aggregation
from millpond.streams.dataflow import App, Node
from millpond.streams.errors import OperatorError, TimerError
from millpond.streams.timers import EVENT, NEVER, PROCESSING, Timer, Timers, timers_store
from millpond.streams.window_ops import (
    count_window,
    session_window,
    sliding_window,
    time_window,
    window_join,
)

# step(key, value, timestamp): one record through an operator and everything after it; the
# timestamp (ms, the input record's) travels with it to outputs and internal topics.
Step = Callable[[Any, Any, int], None]

log = logging.getLogger("millpond.streams")


class Env(Protocol):
    """What running operators need: the operators' stores, a way to send records, and the
    topic of each key_by's internal topic."""

    def store(self, name: str) -> Any: ...

    def send(self, topic: str, key: Any, value: Any, timestamp: int) -> None: ...

    def internal_topic(self, name: str) -> str: ...

    @property
    def clock(self) -> Clock: ...

    def late(self, operator: str) -> None:
        """A record came after every window it belongs to had closed (count it)."""


def wall_ms() -> int:
    """The wall clock in ms."""
    return time_ns() // 1_000_000


def _none(key: Any, value: Any, ts: int) -> None:
    return None


def bind(node: Node, env: Env, memo: dict[int, Any] | None = None) -> Step:
    """The function that runs ``node`` and everything downstream of it for one record (a
    ``process`` operator adds itself to ``env.clock``, for its timers). An operator several
    streams feed (after a ``merge``) is bound once (``memo``), so its state in memory, e.g.
    a window's stream time, is one."""
    memo = {} if memo is None else memo
    step = memo.get(id(node))
    if step is None:
        step = memo[id(node)] = _bind(node, env, memo)
    return step


def _bind(node: Node, env: Env, memo: dict[int, Any]) -> Step:
    kids = [bind(child, env, memo) for child in node.children]
    if not kids:
        emit: Step = _none
    elif len(kids) == 1:
        emit = kids[0]
    else:
        def emit(key: Any, value: Any, ts: int) -> None:
            for kid in kids:
                kid(key, value, ts)
    kind, fn, label = node.kind, node.fn, node.label

    if kind in ("source", "route", "merge"):
        return emit
    if kind == "branch":
        predicates, default = fn
        routes = list(enumerate(zip(predicates, kids, strict=False)))
        rest = kids[len(predicates)] if default else _none

        def step(key: Any, value: Any, ts: int) -> None:
            for i, (predicate, kid) in routes:
                try:
                    taken = predicate(value)
                except Exception as exc:
                    raise OperatorError(f"{label} predicate {i}", exc) from exc
                if taken:
                    kid(key, value, ts)
                    return
            rest(key, value, ts)
        return step
    if kind == "map":
        def step(key: Any, value: Any, ts: int) -> None:
            try:
                out = fn(value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            emit(key, out, ts)
    elif kind == "map_kv":
        def step(key: Any, value: Any, ts: int) -> None:
            try:
                out = fn(key, value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            emit(key, out, ts)
    elif kind == "filter":
        def step(key: Any, value: Any, ts: int) -> None:
            try:
                keep = fn(value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            if keep:
                emit(key, value, ts)
    elif kind == "flat_map":
        def step(key: Any, value: Any, ts: int) -> None:
            try:
                outs = list(fn(value))
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            for out in outs:
                emit(key, out, ts)
    elif kind == "peek":
        def step(key: Any, value: Any, ts: int) -> None:
            try:
                fn(key, value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            emit(key, value, ts)
    elif kind == "stateful_map":
        store = env.store(label)

        def step(key: Any, value: Any, ts: int) -> None:
            state = store.get(key)
            try:
                new, out = fn(state, value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            if new is None:
                if state is not None:
                    store.delete(key)
            else:
                store.put(key, new)
            emit(key, out, ts)
    elif kind == "aggregate":
        store = env.store(label)
        agg: Aggregation = fn
        init, add, result = agg.init, agg.add, agg.result

        def step(key: Any, value: Any, ts: int) -> None:
            state = store.get(key)
            try:
                state = add(init() if state is None else state, value)
                out = result(state)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            store.put(key, state)
            emit(key, out, ts)
    elif kind == "key_by":
        internal, send_to = env.internal_topic(node.name or ""), env.send

        def step(key: Any, value: Any, ts: int) -> None:
            try:
                new_key = fn(value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            send_to(internal, new_key, value, ts)
    elif kind == "to":
        topic, send = node.topic or "", env.send
        if fn is None:
            def step(key: Any, value: Any, ts: int) -> None:
                send(topic, key, value, ts)
        else:
            def step(key: Any, value: Any, ts: int) -> None:
                try:
                    out_key = fn(value)
                except Exception as exc:
                    raise OperatorError(f"to {topic} key", exc) from exc
                send(topic, out_key, value, ts)
    elif kind == "table":
        store = env.store(label)

        def step(key: Any, value: Any, ts: int) -> None:
            if value is None:
                store.delete(key)
            else:
                store.put(key, value)
            emit(key, value, ts)
    elif kind == "join":
        table_name, joiner, left, key_of = fn
        table = env.store(table_name)
        if key_of is None:
            return asof.lookup_join(label, lambda key, value, ts: table.get(key), joiner,
                                    left, emit)

        def by_value(key: Any, value: Any, ts: int) -> Any:
            try:
                wanted = key_of(value)
            except Exception as exc:
                raise OperatorError(f"{label} key", exc) from exc
            return None if wanted is None else table.get(wanted)
        return asof.lookup_join(label, by_value, joiner, left, emit)
    elif kind == "versioned_table":
        return asof.versioned_table(label, fn, env)
    elif kind == "join_asof":
        return asof.join_asof(label, fn, env, emit)
    elif kind == "process":
        return _process(node, env, emit)
    elif kind in ("window_join", "window_join_right"):
        return window_join(node, env, emit, memo)
    elif kind == "window":
        if node.fn.kind == "session":
            return session_window(node, env, emit)
        if node.fn.kind == "count":
            return count_window(node, env, emit)
        if node.fn.kind == "sliding":
            return sliding_window(node, env, emit)
        return time_window(node, env, emit)
    else:  # pragma: no cover - every kind above is the dataflow's
        raise AssertionError(f"unknown operator kind {kind}")
    return step


class Context:
    """What a ``process`` operator's functions get: the current key, its state, the record's
    (or timer's) timestamp, a way to emit records and to set timers.

    ``ctx.state`` is the key's state in the operator's store (None if it has none);
    assigning it writes the store, assigning None deletes it.
    """

    __slots__ = ("key", "timestamp", "_store", "_timers", "_emit", "_clock")

    def __init__(self, store: Any, timers: Timers, emit: Step, clock: Clock) -> None:
        self.key: Any = None
        self.timestamp: int = -1
        self._store = store
        self._timers = timers
        self._emit = emit
        self._clock = clock

    @property
    def state(self) -> Any:
        """The current key's state (None: none yet)."""
        return self._store.get(self.key)

    @state.setter
    def state(self, value: Any) -> None:
        if value is None:
            self._store.delete(self.key)
        else:
            self._store.put(self.key, value)

    def emit(self, value: Any) -> None:
        """Send ``value`` downstream under the current key, with the current timestamp."""
        self._emit(self.key, value, self.timestamp)

    def set_timer(self, time: int, *, processing_time: bool = False) -> None:
        """Call ``on_timer`` for the current key once the stream time (or, with
        ``processing_time``, the wall clock) reaches ``time`` (ms). Setting one twice sets it
        once; it survives restarts and moves with the key's task."""
        self._timers.set(PROCESSING if processing_time else EVENT, time, self.key)
        self._clock.timer_set(time, processing_time)

    def cancel_timer(self, time: int, *, processing_time: bool = False) -> None:
        """Remove the current key's timer at ``time``, if it is set."""
        self._timers.cancel(PROCESSING if processing_time else EVENT, time, self.key)

    @property
    def stream_time(self) -> int:
        """The task's event time: the largest record timestamp it has seen (-1: none)."""
        return self._clock.stream_time

    def now(self) -> int:
        """Processing time: the wall clock in ms (what processing-time timers compare
        with; a test driver's own clock under test)."""
        return self._clock.now()


OnRecord = Callable[[Context, Any], None]
OnTimer = Callable[[Context, Timer], None]


class TimedOperator:
    """A ``process`` operator's timers and how to fire them."""

    def __init__(self, label: str, timers: Timers, ctx: Context, on_timer: OnTimer | None):
        self.label, self.timers, self._ctx, self._on_timer = label, timers, ctx, on_timer

    def fire(self, domain: str, now: int) -> None:
        """Call ``on_timer`` for each timer of ``domain`` due at ``now``."""
        ctx, on_timer, processing = self._ctx, self._on_timer, domain == PROCESSING
        for time, key in self.timers.due(domain, now):
            if on_timer is None:
                continue  # nothing to call (a timer set without on_timer): dropped
            ctx.key, ctx.timestamp = key, time
            try:
                on_timer(ctx, Timer(time, processing))
            except Exception as exc:
                raise TimerError(f"{self.label} on_timer (key {key!r}, time {time})",
                                 exc) from exc


class Clock:
    """The task's clocks: stream time (advanced by each record) and the wall clock, and the
    earliest timer due on each."""

    def __init__(self, now: Callable[[], int] | None = None) -> None:
        self.now = now or wall_ms
        self.operators: list[TimedOperator] = []
        self.stream_time = -1
        self.next_event = NEVER
        self.next_processing = NEVER
        # called with the wall clock (ms) in window(): windows that close when idle
        self.ticks: list[Callable[[int], None]] = []
        # called by undo(): each window or join operator reads back what it keeps in memory
        self.reloads: list[Callable[[], None]] = []

    def undo(self) -> None:
        """A skipped record's store writes were undone: every operator reads back from its
        store the stream time, the earliest timer and the earliest window end that the
        record may have moved in memory, so the record leaves no trace (a skipped record
        far ahead in event time neither closes windows nor fires timers)."""
        for reload in self.reloads:
            reload()
        if self.operators:
            for op in self.operators:
                op.timers.reload()
            self.stream_time = max(op.timers.stream_time for op in self.operators)
            self.next_event = min(op.timers.next(EVENT) for op in self.operators)
            self.next_processing = min(op.timers.next(PROCESSING) for op in self.operators)

    def add(self, op: TimedOperator) -> None:
        self.operators.append(op)
        self.stream_time = max(self.stream_time, op.timers.stream_time)
        self.next_event = min(self.next_event, op.timers.next(EVENT))
        self.next_processing = min(self.next_processing, op.timers.next(PROCESSING))

    def timer_set(self, time: int, processing: bool) -> None:
        if processing:
            self.next_processing = min(self.next_processing, time)
        else:
            self.next_event = min(self.next_event, time)

    def advance(self, timestamp: int) -> None:
        """A record of ``timestamp`` arrived (later than stream time)."""
        self.stream_time = timestamp
        for op in self.operators:
            op.timers.advance(timestamp)

    def fire_event(self) -> None:
        """Fire the event-time timers due at stream time."""
        for op in self.operators:
            op.fire(EVENT, self.stream_time)
        self.next_event = min(op.timers.next(EVENT) for op in self.operators)

    def fire_processing(self, now: int) -> None:
        """Fire the processing-time timers due at ``now`` (ms), and tell the operators that
        watch the wall clock."""
        for tick in self.ticks:
            tick(now)
        if now < self.next_processing:
            return
        for op in self.operators:
            op.fire(PROCESSING, now)
        self.next_processing = min(op.timers.next(PROCESSING) for op in self.operators)

    def wrap(self, step: Step) -> Step:
        """``step`` with the clock: stream time advanced before it, event timers fired
        after it."""
        def timed(key: Any, value: Any, ts: int) -> None:
            if ts > self.stream_time:
                self.advance(ts)
            step(key, value, ts)
            if self.stream_time >= self.next_event:
                self.fire_event()
        return timed


def _process(node: Node, env: Env, emit: Step) -> Step:
    label = node.label
    on_record, on_timer = node.fn
    timers = Timers(env.store(timers_store(label)))
    clock = env.clock
    ctx = Context(env.store(label), timers, emit, clock)
    op = TimedOperator(label, timers, ctx, on_timer)
    clock.add(op)

    def step(key: Any, value: Any, ts: int) -> None:
        ctx.key, ctx.timestamp = key, ts
        try:
            on_record(ctx, value)
        except OperatorError:
            raise
        except Exception as exc:
            raise OperatorError(label, exc) from exc
    return step


def chains(app: App, env: Env) -> dict[str, Step]:
    """One fused function per source topic (internal topics included); with ``process``
    operators, each runs under ``env.clock`` (stream time and event-time timers)."""
    memo: dict[int, Any] = {}  # node (or shared operator state) -> what it was bound to
    out = {topic: bind(node, env, memo) for topic, node in app.sources.items()}
    for name, node in app.repartitions.items():
        out[env.internal_topic(name)] = bind(node, env, memo)
    if env.clock.operators:
        out = {topic: env.clock.wrap(step) for topic, step in out.items()}
    return out


class _TaskEnv:
    def __init__(self, context: TaskContext) -> None:
        from millpond.streams.compile import internal_topic

        self._context = context
        self.collector: MessageCollector | None = None
        # topic -> the collector's record_sender of it
        self._senders: dict[str, Callable[[Any, Any, int | None], None]] = {}
        self.clock = Clock()
        self.late_records: dict[str, int] = {}
        self._late_logged = -10.0
        job = context.config.job
        self.internal_topic = lambda name: internal_topic(job.name, job.id, name)

    def store(self, name: str) -> Any:
        return self._context.get_store(name)

    def late(self, operator: str) -> None:
        """Count a late record; log the counts at most every 10 s."""
        self.late_records[operator] = self.late_records.get(operator, 0) + 1
        now = monotonic()
        if now - self._late_logged >= 10:
            self._late_logged = now
            log.warning("task %s: late records (after their windows closed) so far: %s",
                        self._context.task_name,
                        ", ".join(f"{op} {n}" for op, n in sorted(self.late_records.items())))

    def use(self, collector: MessageCollector) -> None:
        """Send through ``collector`` from now on (each topic's sender is made again)."""
        if collector is not self.collector:
            self.collector = collector
            self._senders = {}

    def send(self, topic: str, key: Any, value: Any, timestamp: int) -> None:
        sender = self._senders.get(topic)
        if sender is None:  # the topic's first record through this collector
            assert self.collector is not None
            sender = self._senders[topic] = self.collector.record_sender(f"kafka.{topic}")
        sender(key, value, timestamp)


class DataflowTask(StreamTask):
    """The StreamTask that runs a dataflow app (``app.class``) in one task: the records of
    task N's partitions go through the app's fused operator chains."""

    def init(self, context: TaskContext) -> None:
        from millpond.streams.compile import load_app

        self._env = _TaskEnv(context)
        self._chains = chains(load_app(context.config), self._env)

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector,
                coordinator: TaskCoordinator) -> None:
        self._env.use(collector)
        ts = envelope.timestamp if envelope.timestamp is not None else -1
        self._chains[envelope.stream](envelope.key, envelope.message, ts)

    @property
    def late_records(self) -> dict[str, int]:
        """Late records per window operator so far (a metric)."""
        return self._env.late_records

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Fire the processing-time timers that are due (``task.window.ms`` apart)."""
        self._env.use(collector)
        self._env.clock.fire_processing(wall_ms())

    def undo_record(self) -> None:
        """The run loop skipped the record being processed and undid its store writes:
        put the operators' stream time (kept in memory too) back as the stores have it."""
        self._env.clock.undo()

    def fused_steps(self, collector: MessageCollector) -> dict[str, Step]:
        """The run loop's fast path: one ``step(key, value, timestamp)`` per input topic,
        called without an envelope (the same chains :meth:`process` runs)."""
        self._env.use(collector)
        return self._chains

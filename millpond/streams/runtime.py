"""Running a dataflow: each source's operator tree fused into one function per record.

:func:`bind` turns a :class:`~millpond.streams.dataflow.Node` tree into nested closures
``step(key, value)``: each calls its user function and hands the result straight to the next
(no envelope, no per-operator dispatch). :class:`DataflowTask` is the StreamTask that runs an
app's sources inside millpond's ordinary tasks, so commits, transactions, restore, fencing
and the error policy are the runtime's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from millpond.api import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    TaskContext,
    TaskCoordinator,
)
from millpond.streams.aggregations import Aggregation
from millpond.streams.dataflow import App, Node
from millpond.streams.errors import OperatorError

Step = Callable[[Any, Any], None]


class Env(Protocol):
    """What running operators need: the operators' stores, a way to send records, and the
    topic of each key_by's internal topic."""

    def store(self, name: str) -> Any: ...

    def send(self, topic: str, key: Any, value: Any) -> None: ...

    def internal_topic(self, name: str) -> str: ...


def _none(key: Any, value: Any) -> None:
    return None


def bind(node: Node, env: Env) -> Step:
    """The function that runs ``node`` and everything downstream of it for one record."""
    kids = [bind(child, env) for child in node.children]
    if not kids:
        emit: Step = _none
    elif len(kids) == 1:
        emit = kids[0]
    else:
        def emit(key: Any, value: Any) -> None:
            for kid in kids:
                kid(key, value)
    kind, fn, label = node.kind, node.fn, node.label

    if kind in ("source", "route", "merge"):
        return emit
    if kind == "branch":
        predicates, default = fn
        routes = list(enumerate(zip(predicates, kids, strict=False)))
        rest = kids[len(predicates)] if default else _none

        def step(key: Any, value: Any) -> None:
            for i, (predicate, kid) in routes:
                try:
                    taken = predicate(value)
                except Exception as exc:
                    raise OperatorError(f"{label} predicate {i}", exc) from exc
                if taken:
                    kid(key, value)
                    return
            rest(key, value)
        return step
    if kind == "map":
        def step(key: Any, value: Any) -> None:
            try:
                out = fn(value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            emit(key, out)
    elif kind == "filter":
        def step(key: Any, value: Any) -> None:
            try:
                keep = fn(value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            if keep:
                emit(key, value)
    elif kind == "flat_map":
        def step(key: Any, value: Any) -> None:
            try:
                outs = list(fn(value))
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            for out in outs:
                emit(key, out)
    elif kind == "peek":
        def step(key: Any, value: Any) -> None:
            try:
                fn(key, value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            emit(key, value)
    elif kind == "stateful_map":
        store = env.store(label)

        def step(key: Any, value: Any) -> None:
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
            emit(key, out)
    elif kind == "aggregate":
        store = env.store(label)
        agg: Aggregation = fn
        init, add, result = agg.init, agg.add, agg.result

        def step(key: Any, value: Any) -> None:
            state = store.get(key)
            try:
                state = add(init() if state is None else state, value)
                out = result(state)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            store.put(key, state)
            emit(key, out)
    elif kind == "key_by":
        internal, send_to = env.internal_topic(node.name or ""), env.send

        def step(key: Any, value: Any) -> None:
            try:
                new_key = fn(value)
            except Exception as exc:
                raise OperatorError(label, exc) from exc
            send_to(internal, new_key, value)
    elif kind == "to":
        topic, send = node.topic or "", env.send

        def step(key: Any, value: Any) -> None:
            send(topic, key, value)
    else:  # pragma: no cover - every kind above is the dataflow's
        raise AssertionError(f"unknown operator kind {kind}")
    return step


def chains(app: App, env: Env) -> dict[str, Step]:
    """One fused function per source topic (internal topics included)."""
    out = {topic: bind(node, env) for topic, node in app.sources.items()}
    for name, node in app.repartitions.items():
        out[env.internal_topic(name)] = bind(node, env)
    return out


class _TaskEnv:
    def __init__(self, context: TaskContext) -> None:
        from millpond.streams.compile import internal_topic

        self._context = context
        self.collector: MessageCollector | None = None
        job = context.config.job
        self.internal_topic = lambda name: internal_topic(job.name, job.id, name)

    def store(self, name: str) -> Any:
        return self._context.get_store(name)

    def send(self, topic: str, key: Any, value: Any) -> None:
        assert self.collector is not None
        self.collector.send(OutgoingMessageEnvelope(f"kafka.{topic}", value, key))


class DataflowTask(StreamTask):
    """The StreamTask that runs a dataflow app (``app.class``) in one task: the records of
    task N's partitions go through the app's fused operator chains."""

    def init(self, context: TaskContext) -> None:
        from millpond.streams.compile import load_app

        self._env = _TaskEnv(context)
        self._chains = chains(load_app(context.config), self._env)

    def process(self, envelope: IncomingMessageEnvelope, collector: MessageCollector,
                coordinator: TaskCoordinator) -> None:
        self._env.collector = collector
        self._chains[envelope.stream](envelope.key, envelope.message)

    def fused_steps(self, collector: MessageCollector) -> dict[str, Step]:
        """The run loop's fast path: one ``step(key, value)`` per input topic, called without
        an envelope (the same chains :meth:`process` runs)."""
        self._env.collector = collector
        return self._chains

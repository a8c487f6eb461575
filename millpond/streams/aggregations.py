"""Aggregations: a fold over the values of one key, kept in the operator's store.

Each aggregation is ``init() -> state``, ``add(state, value) -> state`` and
``result(state) -> output``; its state is what the store holds for the key (JSON by default,
so ``millpond store dump`` and Spark read it). Several at once (``Stream.agg``) keep one
state per key and emit a dict of their results.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Fn = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Aggregation:
    """A fold: ``init``, ``add`` and ``result`` (the output of each update); ``merge`` of two
    states, if it has one (session windows merge the states of sessions a record joins)."""

    init: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    result: Callable[[Any], Any] = _identity
    merge: Callable[[Any, Any], Any] | None = None


def _add(a: Any, b: Any) -> Any:
    return a + b


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _most(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def count() -> Aggregation:
    """How many values the key has seen."""
    return Aggregation(lambda: 0, lambda n, _: n + 1, merge=_add)


def total(by: Fn = _identity) -> Aggregation:
    """The sum of ``by(value)``."""
    return Aggregation(lambda: 0, lambda s, v: s + by(v), merge=_add)


def minimum(by: Fn = _identity) -> Aggregation:
    """The smallest ``by(value)``."""
    return Aggregation(lambda: None, lambda m, v: by(v) if m is None else min(m, by(v)),
                       merge=_least)


def maximum(by: Fn = _identity) -> Aggregation:
    """The largest ``by(value)``."""
    return Aggregation(lambda: None, lambda m, v: by(v) if m is None else max(m, by(v)),
                       merge=_most)


def mean(by: Fn = _identity) -> Aggregation:
    """The mean of ``by(value)`` (its state: ``[sum, count]``)."""
    return Aggregation(lambda: [0, 0], lambda s, v: [s[0] + by(v), s[1] + 1],
                       lambda s: s[0] / s[1], lambda a, b: [a[0] + b[0], a[1] + b[1]])


def collect(by: Fn = _identity) -> Aggregation:
    """Every ``by(value)``, in arrival order (a list that grows with every value: bound it
    with a store TTL)."""
    return Aggregation(list, lambda items, v: [*items, by(v)], merge=_add)


def reduce(fn: Callable[[Any, Any], Any]) -> Aggregation:
    """``fn(accumulated, value)``, starting from the key's first value (state: ``[]`` before
    it, ``[accumulated]`` after)."""
    return Aggregation(list, lambda acc, v: [fn(acc[0], v)] if acc else [v], lambda acc: acc[0],
                       lambda a, b: [fn(a[0], b[0])] if a and b else a or b)


def fold(init: Callable[[], Any], add: Callable[[Any, Any], Any],
         merge: Callable[[Any, Any], Any] | None = None) -> Aggregation:
    """Any fold: ``init()`` then ``add(state, value)`` for each value (``merge(a, b)`` of two
    states, for session windows)."""
    return Aggregation(init, add, merge=merge)


def several(named: dict[str, Aggregation]) -> Aggregation:
    """Several aggregations over one stream: one state (a dict) per key, one output (a dict
    of each one's result)."""
    items = list(named.items())
    merges = {name: agg.merge for name, agg in items}
    return Aggregation(
        lambda: {name: agg.init() for name, agg in items},
        lambda state, v: {name: agg.add(state[name], v) for name, agg in items},
        lambda state: {name: agg.result(state[name]) for name, agg in items},
        None if None in merges.values() else
        lambda a, b: {name: merges[name](a[name], b[name]) for name, _ in items})  # type: ignore[misc]

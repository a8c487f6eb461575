"""The fixture job's input, made deterministically, and its state computed in plain Python.

Nothing of millpond is used here: the state a correct run of :class:`tests.compat.job.CountSum`
must leave is computed from the input messages alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

PARTITIONS = 3
USERS = 24

# store -> partition (as a string, as in JSON) -> key -> value
State = dict[str, dict[str, dict[str, int]]]


@dataclass(frozen=True)
class Message:
    """One input record: the partition it goes to, its key and its JSON value."""

    partition: int
    key: str
    value: dict[str, Any]

    def encoded(self) -> bytes:
        return json.dumps(self.value, sort_keys=True).encode()


def user_partition(user: str, partitions: int = PARTITIONS) -> int:
    """A user's partition: the number in ``user-<n>`` modulo the partition count."""
    return int(user.rsplit("-", 1)[1]) % partitions


def messages(first: int, count: int, users: int = USERS, resets: Iterable[str] = (),
             ) -> Iterator[Message]:
    """``count`` messages with sequence numbers ``first``.. over ``users`` users (amounts
    -50..100, so some sums are negative), then a reset of each user in ``resets``."""
    for seq in range(first, first + count):
        user = f"user-{(seq * 7) % users}"
        yield Message(user_partition(user), user,
                      {"user_id": user, "amount": (seq * 37) % 151 - 50, "seq": seq})
    for user in resets:
        yield Message(user_partition(user), user, {"user_id": user, "reset": True})


def empty_state() -> State:
    return {"counts": {}, "sums": {}}


def apply(state: State, partition: int, value: dict[str, Any]) -> None:
    """Apply one input message (its decoded JSON value) to ``state`` in place."""
    p = str(partition)
    counts = state["counts"].setdefault(p, {})
    sums = state["sums"].setdefault(p, {})
    user = value["user_id"]
    if value.get("reset"):
        counts.pop(user, None)
        sums.pop(user, None)
        return
    counts[user] = counts.get(user, 0) + 1
    sums[user] = sums.get(user, 0) + value["amount"]


def compute(records: Iterable[tuple[int, dict[str, Any]]], state: State | None = None) -> State:
    """The state after ``(partition, value)`` records in offset order per partition."""
    out = state if state is not None else empty_state()
    for partition, value in records:
        apply(out, partition, value)
    return out

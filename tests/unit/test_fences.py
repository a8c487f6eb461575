"""Tasks' fences (init_transactions) run ahead, several at once (millpond.tasks.opening.Fences).

A fake producer stands in for the transactional one (a unit test of this one class; the
broker-side proof is the outage fault tests, where every task's fence waits for its old
transaction's rollback)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from millpond.kafka.errors import TransactionAbortedError
from millpond.tasks.opening import Fences, TaskOpener


class FakeProducer:
    def __init__(self, partition: int, delay: float, fail: bool = False) -> None:
        self.partition, self.delay, self.fail = partition, delay, fail
        self.inited = self.discarded = False

    def init_transactions(self, timeout: float) -> None:
        time.sleep(self.delay)
        if self.fail:
            raise TransactionAbortedError("coordinator away", unavailable=True)
        self.inited = True

    def discard(self) -> None:
        self.discarded = True


def drain(steps: Any) -> Any:
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def test_fences_of_due_tasks_overlap() -> None:
    made: dict[int, FakeProducer] = {}

    def make(p: int) -> Any:
        made[p] = FakeProducer(p, 0.3)
        return made[p]

    fences = Fences(make, workers=8)
    began = time.monotonic()
    for p in range(6):
        fences.start(p)
    producers = [drain(fences.take(p)) for p in range(6)]
    assert time.monotonic() - began < 0.9  # 6 x 0.3 s one after another would be 1.8 s
    assert [p.partition for p in producers] == list(range(6))
    assert all(p.inited for p in producers)
    fences.close()


def test_a_dropped_fence_is_discarded_and_a_failed_one_raises() -> None:
    made: dict[int, FakeProducer] = {}
    done = threading.Event()

    def make(p: int) -> Any:
        made[p] = FakeProducer(p, 0.1, fail=(p == 2))
        if p == 1:
            done.set()
        return made[p]

    fences = Fences(make)
    fences.start(1)
    fences.drop(1)
    assert done.wait(5)
    deadline = time.monotonic() + 5
    while not made[1].discarded and time.monotonic() < deadline:
        time.sleep(0.02)
    assert made[1].discarded
    with pytest.raises(TransactionAbortedError):
        drain(fences.take(2))
    assert made[2].discarded
    fences.close()


def test_the_opener_fences_every_due_task_ahead() -> None:
    """While the first task opens, the others' fences are already under way."""
    started: list[int] = []
    fences = Fences(lambda p: started.append(p) or FakeProducer(p, 0.2))  # type: ignore[func-returns-value]

    def steps(p: int) -> Any:
        producer = yield from fences.take(p)
        return producer

    opener = TaskOpener(steps, hold_s=0.0, fences=fences)
    for p in (0, 1, 2):
        opener.add(p)
    opener.step(0.05)
    time.sleep(0.05)
    assert sorted(started) == [0, 1, 2]
    opener.close()
    fences.close()

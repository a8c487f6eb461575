"""The run loop while a task's pipelined commit is under way (millpond.tasks.runloop): the
other tasks' records are handled at once, the committing task's are held, in order, and
handed to it once its commit is over; a task closed meanwhile never gets them."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from millpond.tasks.runloop import HELD_MAX, HELD_MAX_BYTES, RunLoop
from millpond.tasks.stalls import StallWatch


class Msg:
    def __init__(self, partition: int, offset: int, size: int = 100) -> None:
        self._p, self._o, self._size = partition, offset, size

    def __len__(self) -> int:  # a confluent-kafka Message's len(): its value's
        return self._size

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def topic(self) -> str:
        return "in"


class Task:
    def __init__(self, partition: int, seen: list[tuple[int, int]]) -> None:
        self.partition, self.seen = partition, seen
        self.coordinator = SimpleNamespace(shutdown_requested=False, commit_requested=False)

    def handle_batch(self, run: list[Msg], serdes: Any, on_error: Any) -> int:
        self.seen.extend((m.partition(), m.offset()) for m in run)
        return len(run)


def loop(tasks: dict[int, Task], committing: set[int]) -> RunLoop:
    run = RunLoop.__new__(RunLoop)
    run.manager = SimpleNamespace(  # type: ignore[assignment]
        consumer=None, committing=lambda p: p in committing,
        settle=lambda p=None: committing.discard(p) if p is not None else committing.clear())
    run.tasks = tasks  # type: ignore[assignment]
    run._held = {}
    run._stalls = StallWatch()
    run._serdes_of = run._on_error = None  # type: ignore[assignment]
    run._rejoin = None
    run._eof = set()
    run.stopping = False
    return run


def test_a_committing_task_s_records_wait_in_order_while_the_others_go_on() -> None:
    seen: list[tuple[int, int]] = []
    tasks = {0: Task(0, seen), 1: Task(1, seen)}
    committing = {0}
    run = loop(tasks, committing)
    run._dispatch([Msg(0, 5), Msg(1, 7), Msg(0, 6)])
    assert seen == [(1, 7)]  # the other task's record at once
    run._dispatch([Msg(0, 7), Msg(1, 8)])
    assert seen == [(1, 7), (1, 8)]
    run._release_held()  # still committing: nothing moves
    assert seen == [(1, 7), (1, 8)]
    committing.clear()  # its commit is over
    run._release_held()
    assert seen == [(1, 7), (1, 8), (0, 5), (0, 6), (0, 7)]  # in the order polled
    run._dispatch([Msg(0, 8)])
    assert seen[-1] == (0, 8) and run._held == {}


def test_records_held_for_a_task_that_closed_are_not_handed_to_its_successor() -> None:
    seen: list[tuple[int, int]] = []
    tasks = {0: Task(0, seen)}
    committing = {0}
    run = loop(tasks, committing)
    run._dispatch([Msg(0, 5)])
    tasks[0] = Task(0, seen)  # its commit failed: closed, reopened from its checkpoint
    committing.clear()
    run._release_held()
    assert seen == [] and run._held == {}  # the new task reads them again from Kafka


def test_the_records_held_are_bounded_the_loop_waits_for_the_commit_past_that() -> None:
    seen: list[tuple[int, int]] = []
    committing = {0}
    run = loop({0: Task(0, seen)}, committing)
    for offset in range(HELD_MAX - 1):
        run._dispatch([Msg(0, offset)])
    assert seen == [] and committing == {0}
    run._dispatch([Msg(0, HELD_MAX - 1)])  # the limit: wait for the commit, then go on
    assert committing == set() and len(seen) == HELD_MAX and run._held == {}


def test_the_bytes_held_are_bounded_too() -> None:
    """Large records reach the byte bound long before the count bound."""
    seen: list[tuple[int, int]] = []
    committing = {0}
    run = loop({0: Task(0, seen)}, committing)
    size = 64 << 10
    below = HELD_MAX_BYTES // size - 1
    for offset in range(below):
        run._dispatch([Msg(0, offset, size)])
    assert seen == [] and committing == {0}
    run._dispatch([Msg(0, below, size)])
    assert committing == set() and len(seen) == below + 1 and run._held == {}

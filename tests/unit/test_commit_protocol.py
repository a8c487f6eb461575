"""The commit protocol (millpond.tasks.commit) with fake tasks, no broker: the phase order
(every task through a phase before any enters the next; stores flushed and delivered before
the checkpoint is written), what a fenced or aborted task leaves behind, and the group
offsets sent for monitoring."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from millpond.kafka.errors import ProducerFencedError, TransactionAbortedError
from millpond.tasks.commit import CommitFailure, CommitProtocol, PendingCommit
from millpond.tasks.instance import TaskMetrics


class FakeProducer:
    def __init__(self, task: FakeTask, fail: dict[str, Exception]) -> None:
        self.task, self.fail = task, fail

    def _step(self, step: str) -> None:
        self.task.calls.append((step, self.task.name))
        if step in self.fail:
            raise self.fail[step]

    def flush_and_check(self) -> None:
        self._step("deliver")

    def send(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        self._step("checkpoint")
        self.task.sent.append((topic, partition, key, value))

    def commit_transaction(self) -> None:
        self._step("txn")

    def begin_transaction(self) -> None:
        self._step("begin")


class FakeTask:
    """The parts of a TaskInstance the protocol touches; ``calls`` is shared by all tasks."""

    def __init__(self, partition: int, calls: list[tuple[str, str]], moved: bool = True,
                 **fail: Exception) -> None:
        self.name, self.partition, self.calls = f"partition-{partition}", partition, calls
        self.committed_offsets = {"in": 10}
        self.next_offsets = {"in": 15 if moved else 10}
        self.metrics = TaskMetrics()
        self.coordinator = SimpleNamespace(commit_requested=True)
        self.producer = FakeProducer(self, fail)
        self.sent: list[tuple[str, int, bytes, bytes]] = []
        self.storage = SimpleNamespace(
            flush=lambda: self.producer._step("flush"),
            record_delivered=lambda p: calls.append(("delivered", self.name))
            if p is self.producer else None)

    def checkpoint(self) -> Any:
        return SimpleNamespace(to_bytes=lambda: f"ckpt {self.next_offsets}".encode())

    def after_commit(self, final: bool = False, budget: Any = None) -> None:
        self.producer._step("local final" if final else "local")

    def checkpoint_local(self, budget: Any) -> None:  # a pipelined commit's, on its thread
        self.producer._step("local")

    def committed(self) -> None:  # ... and the rest, back on the caller's thread
        self.producer._step("marked")


class FakeConsumer:
    def __init__(self, error: Exception | None = None) -> None:
        self.commits: list[tuple[list[TopicPartition], bool]] = []
        self.error = error

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits.append((offsets, asynchronous))
        if self.error is not None:
            raise self.error


def _commit(tasks: list[FakeTask], consumer: FakeConsumer | None = None) -> list[CommitFailure]:
    protocol = CommitProtocol(consumer or FakeConsumer(), "ckpt-topic")  # type: ignore[arg-type]
    return protocol.commit(tasks)  # type: ignore[arg-type]


def test_phases_in_order_each_task_through_a_phase_before_the_next() -> None:
    calls: list[tuple[str, str]] = []
    a, b = FakeTask(0, calls), FakeTask(1, calls)
    consumer = FakeConsumer()
    assert _commit([a, b], consumer) == []
    steps = ["flush", "deliver", "delivered", "checkpoint", "txn", "local", "begin"]
    # every task's records are acknowledged before any task's changelog ends are noted: the
    # ends are read for all of them at once (millpond.kafka.producer.resolve_together)
    want = [(s, t) for phase in (["flush"], ["deliver"], ["delivered"], ["checkpoint"], ["txn"],
                                 ["local"], ["begin"])
            for t in ("partition-0", "partition-1") for s in phase]
    assert calls == want and {s for s, _ in calls} == set(steps)
    assert a.sent == [("ckpt-topic", 0, b"partition-0", b"ckpt {'in': 15}")]
    assert b.sent == [("ckpt-topic", 1, b"partition-1", b"ckpt {'in': 15}")]
    for t in (a, b):
        assert t.committed_offsets == t.next_offsets == {"in": 15}
        assert t.committed_offsets is not t.next_offsets  # a copy
        assert t.metrics.commits == 1 and t.metrics.commit_seconds.count == 1
        assert 0 <= t.metrics.commit_s == t.metrics.commit_seconds.sum < 60
        assert t.metrics.last_commit_time is not None
        assert t.coordinator.commit_requested is False
    assert _sent(consumer) == [([("in", 0, 15), ("in", 1, 15)], True)]
    assert _commit([a, b], consumer) == []  # the metrics add up over commits
    assert a.metrics.commits == 2 and a.metrics.commit_s == a.metrics.commit_seconds.sum


def _sent(consumer: FakeConsumer) -> list[tuple[list[tuple[str, int, int]], bool]]:
    """The group commits as (topic, partition, offset): TopicPartition's == skips offsets."""
    return [([(tp.topic, tp.partition, tp.offset) for tp in offsets], asynchronous)
            for offsets, asynchronous in consumer.commits]


def test_crash_points_follow_each_task_step_of_each_phase(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from millpond.tasks import commit

    points: list[tuple[str, str | None, Any, Any]] = []
    monkeypatch.setattr(commit, "crash_point", lambda *args: points.append(args))
    calls: list[tuple[str, str]] = []
    fenced = FakeTask(1, calls, txn=ProducerFencedError("fenced"))
    assert len(_commit([FakeTask(0, calls), fenced])) == 1
    names = ["before-flush", "after-flush", "after-changelog-delivered",
             "after-checkpoint-topic", "after-transaction-commit", "after-local-checkpoint"]
    want = [(p, t, {"in": 10}, {"in": 15}) for p in names for t in ("partition-0", "partition-1")
            if not (t == "partition-1" and names.index(p) >= 4)]  # fenced in its txn
    assert points == want


@pytest.mark.parametrize(("step", "error", "hold"), [
    ("deliver", ProducerFencedError("fenced"), True),
    ("checkpoint", TransactionAbortedError("aborted"), False),
    ("txn", TransactionAbortedError("no coordinator", unavailable=True), True),
    ("txn", KafkaException(KafkaError(KafkaError._FAIL, "injected",
                                      txn_requires_abort=True)), False),
])
def test_a_failed_task_is_reported_and_left_uncommitted(step: str, error: Exception,
                                                        hold: bool) -> None:
    """The first task fails; the second still goes through every phase."""
    calls: list[tuple[str, str]] = []
    a, b = FakeTask(0, calls, **{step: error}), FakeTask(1, calls)
    consumer = FakeConsumer()
    failures = _commit([a, b], consumer)
    assert [(f.task, f.hold) for f in failures] == [(a, hold)]
    assert isinstance(failures[0].error, (ProducerFencedError, TransactionAbortedError))
    assert str(error.args[0]).split()[-1] in str(failures[0].error)  # its message kept
    after = ["deliver", "checkpoint", "txn", "local", "begin"]
    assert [s for s, t in calls if t == "partition-0"][-1] == step  # nothing after it
    assert [s for s, t in calls if t == "partition-1" and s in after] == after
    assert a.committed_offsets == {"in": 10} and a.metrics.commits == 0
    assert a.coordinator.commit_requested is True
    assert b.metrics.commits == 1
    assert _sent(consumer) == [([("in", 1, 15)], True)]


def test_a_kafka_error_that_needs_no_abort_stops_the_commit() -> None:
    error = KafkaException(KafkaError(KafkaError._FAIL, "broken"))
    with pytest.raises(KafkaException):
        _commit([FakeTask(0, [], txn=error)])


def test_group_offsets_are_for_monitoring_only(caplog: pytest.LogCaptureFixture) -> None:
    """A failed group commit is harmless (logged at debug); tasks with no input offsets
    send none."""
    calls: list[tuple[str, str]] = []
    failing = FakeConsumer(KafkaException(KafkaError(KafkaError._TRANSPORT, "down")))
    with caplog.at_level(logging.DEBUG, "millpond.container"):
        assert _commit([FakeTask(0, calls)], failing) == []
    assert len(failing.commits) == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"committing offsets to the group failed: {failing.error}"]
    idle = FakeTask(0, calls)
    idle.next_offsets = {}
    consumer = FakeConsumer()
    assert _commit([idle], consumer) == [] and consumer.commits == []


@pytest.mark.parametrize("moved", [False, True])
def test_a_commit_that_moved_input_is_noted_for_the_crash_points(
        moved: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from millpond.tasks import faults

    monkeypatch.setattr(faults, "_input_committed", False)
    assert _commit([FakeTask(0, [], moved=moved)]) == []
    assert faults._input_committed is moved


# ---- a pipelined commit (CommitProtocol.start / finish) ----------------------------------

def test_a_pipelined_commit_runs_the_same_steps_and_crash_points_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from millpond.tasks import commit

    points: list[str] = []
    monkeypatch.setattr(commit, "crash_point", lambda name, *args: points.append(name))
    calls: list[tuple[str, str]] = []
    task, consumer = FakeTask(0, calls), FakeConsumer()
    protocol = CommitProtocol(consumer, "ckpt-topic")  # type: ignore[arg-type]
    pending = protocol.start(task)  # type: ignore[arg-type]
    assert isinstance(pending, PendingCommit)
    assert protocol.finish(pending) is None
    assert [s for s, _ in calls] == ["flush", "deliver", "delivered", "checkpoint", "txn",
                                     "local", "marked", "begin"]
    assert points == ["before-flush", "after-flush", "after-changelog-delivered",
                      "after-checkpoint-topic", "after-transaction-commit",
                      "after-local-checkpoint"]
    assert task.sent == [("ckpt-topic", 0, b"partition-0", b"ckpt {'in': 15}")]
    assert task.committed_offsets == {"in": 15} and task.metrics.commits == 1
    assert task.coordinator.commit_requested is False
    assert _sent(consumer) == [([("in", 0, 15)], True)]


def test_the_caller_goes_on_while_the_commit_thread_waits_for_kafka() -> None:
    """start() returns once the stores are written down; the transaction's commit is
    waited for on the commit thread, and only finish() makes the offsets committed."""
    calls: list[tuple[str, str]] = []
    task = FakeTask(0, calls)
    answered, waiting = threading.Event(), threading.Event()

    def commit_transaction() -> None:  # a coordinator that answers when told to
        waiting.set()
        assert answered.wait(10)
        calls.append(("txn", task.name))

    task.producer.commit_transaction = commit_transaction  # type: ignore[method-assign]
    protocol = CommitProtocol(FakeConsumer(), "ckpt-topic")  # type: ignore[arg-type]
    pending = protocol.start(task)  # type: ignore[arg-type]
    assert isinstance(pending, PendingCommit)
    assert waiting.wait(10) and not pending.done  # the caller is free; the thread waits
    assert task.committed_offsets == {"in": 10} and task.metrics.commits == 0
    answered.set()
    assert protocol.finish(pending) is None
    assert [s for s, _ in calls][-3:] == ["local", "marked", "begin"]
    assert task.committed_offsets == {"in": 15} and task.metrics.commits == 1


@pytest.mark.parametrize(("step", "error"), [
    ("flush", ProducerFencedError("fenced")),
    ("deliver", ProducerFencedError("fenced")),
    ("txn", TransactionAbortedError("aborted")),
])
def test_a_pipelined_commit_that_fails_is_reported_and_left_uncommitted(
        step: str, error: Exception) -> None:
    calls: list[tuple[str, str]] = []
    task, consumer = FakeTask(0, calls, **{step: error}), FakeConsumer()
    protocol = CommitProtocol(consumer, "ckpt-topic")  # type: ignore[arg-type]
    started = protocol.start(task)  # type: ignore[arg-type]
    failure = started if isinstance(started, CommitFailure) else protocol.finish(started)
    assert failure is not None and failure.task is task and failure.error is error
    assert isinstance(started, CommitFailure) == (step == "flush")  # a flush fails at once
    assert [s for s, _ in calls][-1] == step  # nothing after it
    assert task.committed_offsets == {"in": 10} and task.metrics.commits == 0
    assert consumer.commits == []


def test_what_the_commit_thread_raises_is_raised_by_finish() -> None:
    error = KafkaException(KafkaError(KafkaError._FAIL, "broken"))
    protocol = CommitProtocol(FakeConsumer(), "ckpt-topic")  # type: ignore[arg-type]
    pending = protocol.start(FakeTask(0, [], deliver=error))  # type: ignore[arg-type]
    assert isinstance(pending, PendingCommit)
    with pytest.raises(KafkaException):
        protocol.finish(pending)

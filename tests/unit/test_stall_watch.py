"""The stall watch: which tasks are suspects, and what a check does (a recording consumer;
the real job with a stopped fetch: tests/faults/test_fetch_stall.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import TopicPartition

from millpond.tasks.stalls import StallWatch


class Consumer:
    def __init__(self, positions: dict[int, int]) -> None:
        self.positions = positions
        self.calls: list[tuple[str, list[tuple[int, int]]]] = []

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions[tp.partition])
                for tp in tps]

    def _record(self, what: str, tps: list[TopicPartition]) -> None:
        self.calls.append((what, [(tp.partition, tp.offset) for tp in tps]))

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        self._record("unassign", tps)

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        self._record("assign", tps)

    def resume(self, tps: list[TopicPartition]) -> None:
        self._record("resume", tps)


def task(partition: int, offset: int) -> Any:
    return SimpleNamespace(name=f"partition-{partition}", next_offsets={"in": offset})


def test_a_task_without_records_for_the_bound_is_a_suspect() -> None:
    watch = StallWatch(stall_s=30.0)
    assert watch.suspects([0, 1], now=100.0) == []  # new tasks count from now
    watch.fed(0, 120.0)
    assert watch.suspects([0, 1], now=130.0) == [1]
    assert watch.suspects([0], now=200.0) == [0]  # task 1 gone: forgotten
    assert watch.suspects([0, 1], now=200.0) == [0]


def test_a_suspect_whose_end_is_past_its_position_is_assigned_again() -> None:
    watch = StallWatch(stall_s=30.0, every_s=10.0)
    tasks = {0: task(0, 50), 1: task(1, 500)}
    consumer = Consumer({0: 50, 1: 500})
    ends = {0: 50, 1: 3664}  # partition 0 idle at its end; partition 1 has 3,164 waiting
    watch.suspects([0, 1], now=0.0)
    watch.fed(0, 25.0)
    found = watch.check(tasks, ["in"], consumer, 40.0, kafka_up=True,  # type: ignore[arg-type]
                        ends=lambda c, t, p: ends[p])
    assert [(s.partition, s.position, s.end) for s in found] == [(1, 500, 3664)]
    assert consumer.calls == [("unassign", [(1, -1001)]), ("assign", [(1, 500)]),
                              ("resume", [(1, 500)])]
    # not again before every_s; and the reassigned task counts as fed
    assert watch.check(tasks, ["in"], consumer, 45.0, kafka_up=True,  # type: ignore[arg-type]
                       ends=lambda c, t, p: ends[p]) == []
    assert watch.suspects([0, 1], now=60.0) == [0]


def test_an_idle_input_and_an_outage_are_left_alone() -> None:
    watch = StallWatch(stall_s=30.0, every_s=10.0)
    tasks = {0: task(0, 50)}
    consumer = Consumer({0: 50})
    watch.suspects([0], now=0.0)
    assert watch.check(tasks, ["in"], consumer, 40.0, kafka_up=True,  # type: ignore[arg-type]
                       ends=lambda c, t, p: 50) == []
    read: list[int] = []
    assert watch.check(tasks, ["in"], consumer, 100.0, kafka_up=False,  # type: ignore[arg-type]
                       ends=lambda c, t, p: read.append(p) or 99) == []
    assert read == [] and consumer.calls == []  # Kafka away: not even asked

"""Waking the fetchers of the partitions that stayed after a rebalance: one request per
leader, sent off the caller's thread (millpond.kafka.wake)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from millpond.kafka.reading import watermarks
from millpond.kafka.wake import WAKE_AFTER_S, FetcherWake, one_per_leader
from tests.kafka_util import create_topic


class Recording:
    """A consumer (real or a stand-in's metadata) that records the watermark requests."""

    def __init__(self, inner: Any = None, leaders: dict[int, int] | None = None,
                 gate: threading.Event | None = None) -> None:
        self.inner, self.leaders, self.gate = inner, leaders or {}, gate
        self.asked: list[tuple[str, int]] = []
        self.answers: list[tuple[int, int]] = []

    def list_topics(self, topic: str, timeout: float) -> Any:
        if self.inner is not None:
            return self.inner.list_topics(topic, timeout=timeout)
        parts = {p: SimpleNamespace(leader=leader) for p, leader in self.leaders.items()}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=parts)})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        if self.gate is not None:
            assert self.gate.wait(10)
        self.asked.append((tp.topic, tp.partition))
        answer = self.inner.get_watermark_offsets(tp, timeout=timeout) if self.inner else (0, 0)
        self.answers.append(answer)
        return answer


def _tps(topic: str, partitions: range) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def test_one_request_per_leader_and_one_for_each_partition_whose_leader_is_unknown() -> None:
    consumer = Recording(leaders={0: 1, 1: 1, 2: 2, 3: 2, 4: -1})
    chosen = one_per_leader(consumer, _tps("t", range(5)))  # type: ignore[arg-type]
    assert [(tp.topic, tp.partition) for tp in chosen] == [("t", 0), ("t", 2), ("t", 4)]
    wake = FetcherWake()
    try:
        wake.wake(consumer, _tps("t", range(5)))  # type: ignore[arg-type]
        wake.settle()
    finally:
        wake.close()
    assert consumer.asked == [("t", 0), ("t", 2), ("t", 4)] * len(WAKE_AFTER_S)


def test_the_caller_does_not_wait_and_one_wake_up_is_under_way_at_a_time() -> None:
    gate = threading.Event()
    consumer = Recording(leaders={0: 1}, gate=gate)
    wake = FetcherWake()
    try:
        wake.wake(consumer, _tps("t", range(1)))  # type: ignore[arg-type]
        wake.wake(consumer, _tps("t", range(1)))  # type: ignore[arg-type]  # dropped
        assert consumer.asked == [], "the request waits on its own thread"
        gate.set()
        wake.settle()
        assert consumer.asked == [("t", 0)] * len(WAKE_AFTER_S)
        wake.wake(consumer, [])  # nothing stayed: nothing to wake
        wake.settle()
        assert consumer.asked == [("t", 0)] * len(WAKE_AFTER_S)
    finally:
        gate.set()
        wake.close()


def test_a_failing_request_is_only_a_missed_hint() -> None:
    class Broken(Recording):
        def list_topics(self, topic: str, timeout: float) -> Any:
            raise RuntimeError("Consumer closed")

    wake = FetcherWake()
    try:
        wake.wake(Broken(), _tps("t", range(2)))  # type: ignore[arg-type]
        wake.settle()  # no exception
    finally:
        wake.close()


@pytest.mark.kafka
def test_against_the_broker_one_partition_of_the_single_leader_is_asked(
    kafka_bootstrap: str, topic_name: Callable[[str], str],
) -> None:
    topic = topic_name("wake")
    create_topic(kafka_bootstrap, topic, 4)
    real = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic})
    consumer = Recording(inner=real)
    wake = FetcherWake()
    try:
        # the new topic's leader known first (a request before it fails: a missed hint)
        assert [watermarks(real, topic, p) for p in range(4)] == [(0, 0)] * 4
        wake.wake(consumer, _tps(topic, range(4)))  # type: ignore[arg-type]
        wake.settle()
        assert consumer.asked == [(topic, 0)] * len(WAKE_AFTER_S), "one broker: one request a time"
        assert set(consumer.answers) == {(0, 0)}, "the broker answered (an empty partition)"
    finally:
        wake.close()
        real.close()

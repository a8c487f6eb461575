"""A just-opened task's lag is known at once: before the consumer's first fetch of its
partition (no cached watermarks yet) it comes from the partition end read when the task
opened, and the metrics refresh samples a new task without waiting out its 1 s period (a
scrape right after a rebalance used to see one partition of four)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from millpond.tasks.instance import TaskInstance
from millpond.tasks.telemetry import RuntimeMetrics
from tests.kafka_util import create_topic

pytestmark = pytest.mark.kafka


def task(partition: int, next_offsets: dict[str, int], ends: dict[str, int]) -> Any:
    # Only what lag() and a metrics sample read; a task's storage and producer are not
    # involved in its lag.
    return TaskInstance(partition, SimpleNamespace(), SimpleNamespace(stores={}, backups=None),
                        SimpleNamespace(delivery_errors=0), None,  # type: ignore[arg-type]
                        next_offsets, input_ends=ends)


def test_lag_before_the_first_fetch_comes_from_the_end_read_at_open(kafka_bootstrap: str) -> None:
    topic = f"lag-open-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(7):
        producer.produce(topic, value=b"x", partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic})
    try:
        t = task(1, {topic: 2}, {topic: 7})
        # nothing fetched: the consumer has no watermarks of its own for the partition
        assert consumer.get_watermark_offsets(
            TopicPartition(topic, 1), cached=True)[1] < 0
        assert t.lag(consumer, [topic]) == {topic: 5}
        unknown = task(0, {}, {})  # no end known either way: left out, as before
        assert unknown.lag(consumer, [topic]) == {}

        tasks: dict[int, Any] = {1: t}
        metrics = RuntimeMetrics("job", tasks, [topic], lambda: None)
        metrics.refresh(consumer, now=100.0)
        assert [s.lag for s in metrics.sample()] == [{topic: 5}]
        tasks[0] = task(0, {topic: 0}, {topic: 0})  # a task opens 0.1 s later
        metrics.refresh(consumer, now=100.1)
        assert {s.task: s.lag for s in metrics.sample()} == {
            "partition-0": {topic: 0}, "partition-1": {topic: 5}}
    finally:
        consumer.close()

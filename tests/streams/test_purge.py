"""Internal topics are purged below the reading tasks' committed positions (real broker)."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from millpond.tasks.purge import InternalTopicPurger
from tests.kafka_util import create_topic

pytestmark = pytest.mark.kafka


def test_records_below_the_committed_position_are_deleted(
    kafka_bootstrap: str, topic_name: Callable[[str], str],
) -> None:
    topic = topic_name("repartition")
    create_topic(kafka_bootstrap, topic, 2, **{"retention.ms": "-1"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(20):
        producer.produce(topic, b"v", partition=i % 2)
    assert producer.flush(30) == 0
    purger = InternalTopicPurger(AdminClient({"bootstrap.servers": kafka_bootstrap}), [topic],
                                 every_s=30)
    # task 1 has read past its last commit (tasks commit in turns): only what it committed
    tasks = [SimpleNamespace(partition=0, next_offsets={topic: 7}, committed_offsets={topic: 7}),
             SimpleNamespace(partition=1, next_offsets={topic: 14},
                             committed_offsets={topic: 10})]
    began = time.monotonic()
    purger.after_commit(tasks, began)  # not yet: every_s has not passed
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic})

    def low(p: int) -> int:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0])

    assert (low(0), low(1)) == (0, 0)
    purger.after_commit(tasks, began + 31)
    assert (low(0), low(1)) == (7, 10)
    consumer.close()

"""millpond's partition functions agree with librdkafka's producers, record by record."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from millpond.partitioner import partition_of
from tests.kafka_util import create_topic

pytestmark = pytest.mark.kafka

PARTITIONS = 7
RECORDS = 3000


def _keys() -> list[bytes]:
    rng = random.Random(1121)
    keys = [b"", b"21", b"foobar", b"abc", bytes(range(256))]
    keys += [f"user-{i}".encode() for i in range(1000)]
    keys += [rng.randbytes(rng.randint(1, 64)) for _ in range(RECORDS - len(keys))]
    return keys


def _placed(bootstrap: str, topic: str) -> list[tuple[bytes, int]]:
    """(key, partition) of every record in ``topic``, read to each partition's end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[tuple[bytes, int]] = []
    ended: set[int] = set()
    try:
        for _ in range(600):  # bounded: ~60 s at most
            for msg in consumer.consume(500, 0.1):
                if msg.error():
                    ended.add(msg.partition() or 0)
                else:
                    out.append((msg.key() or b"", msg.partition() or 0))
            if len(ended) == PARTITIONS:
                break
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize(("librdkafka", "ours"), [("murmur2_random", "murmur2"),
                                                  ("consistent_random", "consistent_random")])
def test_partitioner_agrees_on_every_record(
    kafka_bootstrap: str, topic_name: Callable[[str], str], librdkafka: str, ours: str,
) -> None:
    topic = topic_name(f"placed-{librdkafka}")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": librdkafka,
                         "linger.ms": 5})
    keys = _keys()
    for key in keys:
        producer.produce(topic, key=key, value=b"v")  # no partition: the producer chooses
    assert producer.flush(30) == 0
    placed = _placed(kafka_bootstrap, topic)
    assert len(placed) == len(keys)
    if ours == "consistent_random":  # an empty key is placed at random, as partition_of says
        placed = [(k, p) for k, p in placed if k]
        assert len(placed) == len(keys) - 1
    wrong = [(k, p) for k, p in placed if partition_of(k, PARTITIONS, ours) != p]
    assert not wrong, f"{len(wrong)} of {len(placed)} records elsewhere, e.g. {wrong[:3]}"
    assert len({p for _, p in placed}) == PARTITIONS  # the keys spread over every partition

"""The memory plan bounds the input prefetch by count as well as by bytes.

librdkafka counts a queued message against ``queued.max.messages.kbytes`` by its payload
only, and each costs ~450 B more; with librdkafka's ``queued.min.messages`` of 100,000 a
session job at a 128 MiB budget held ~29 MiB of prefetched small messages against the
plan's 3.4 MiB. The plan now sets ``queued.min.messages`` (one message a KiB of the share)
and ``max.partition.fetch.bytes`` (an eighth of it): measured here on the real broker from
librdkafka's own statistics of its fetch queue, with and without those settings."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from millpond.config import Config
from millpond.config.properties import parse_properties
from millpond.job import Job
from millpond.kafka.clients import SETTINGS_SOURCE
from millpond.tasks.container import input_fetch_conf
from tests.kafka_util import create_topic

pytestmark = pytest.mark.kafka

PARTITIONS = 2
PER_PARTITION = 60_000
PLAN_KEYS = ("queued.min.messages", "max.partition.fetch.bytes")


def _job(bootstrap: str, topic: str, budget_mb: int = 96) -> Job:
    text = (f"job.name=prefetch-{uuid.uuid4().hex[:8]}\n"
            "task.class=tests.jobs.counting.Counter\n"
            f"task.inputs=kafka.{topic}\n"
            f"systems.kafka.bootstrap.servers={bootstrap}\n"
            f"job.container.memory.mb={budget_mb}\n")
    return Job(Config.from_properties(parse_properties(text, "job.properties")))


def _largest_queue(conf: dict[str, Any], topic: str, partitions: int = PARTITIONS) -> int:
    """The most messages librdkafka held queued while nothing was consumed, once the queue
    stopped growing (librdkafka's statistics every 100 ms; each partition's ``fetchq_cnt``
    reads the consumer's one queue, which its partitions' queues are forwarded to)."""
    seen: list[int] = []

    def stats(text: str) -> None:
        parts = [p for t in json.loads(text)["topics"].values()
                 for p in t["partitions"].values() if p["partition"] >= 0]
        if parts:
            seen.append(max(p["fetchq_cnt"] for p in parts))

    consumer = Consumer({**conf, "group.id": f"prefetch-{uuid.uuid4().hex[:8]}",
                         "statistics.interval.ms": 100, "stats_cb": stats,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 30
        # Statistics come with a poll, and a poll returns at once with a message when one is
        # queued: poll at the statistics' pace until the queue stopped growing for 0.4 s
        # (each poll takes one message of thousands: a full queue shrinks by one a poll).
        while time.monotonic() < deadline:
            consumer.poll(0.1)
            if len(seen) >= 10 and 0 < seen[-1] <= seen[-5]:
                break
            time.sleep(0.1)
        assert seen and seen[-1] > 0, f"no fetch queue statistics in 30 s: {seen[-5:]}"
        return max(seen)
    finally:
        consumer.close()


def _fill(bootstrap: str, topic: str, partitions: int, per_partition: int) -> int:
    """A new topic of tiny records (7-byte keys, 7-byte values); one record's bytes."""
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "queue.buffering.max.messages": partitions * per_partition})
    value = b'{"u":1}'
    for i in range(partitions * per_partition):
        producer.produce(topic, key=b"k%06d" % i, value=value, partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    return len(b"k000000") + len(value)


def test_the_input_prefetch_is_bounded_by_count_as_well_as_bytes(
        kafka_bootstrap: str, topic_name: Any) -> None:
    topic = topic_name("prefetch")
    record = _fill(kafka_bootstrap, topic, PARTITIONS, PER_PARTITION)

    job = _job(kafka_bootstrap, topic)
    conf = {k: v for k, v in job.consumer_conf.items()
            if k not in ("error_cb", "logger", SETTINGS_SOURCE)}
    count, fetch = job.memory.input_messages, job.memory.input_fetch_bytes
    # 96 MiB, the plan's smallest: 1,747 messages, one partition's response 218 KiB
    assert (conf["queued.min.messages"], conf["max.partition.fetch.bytes"]) == (count, fetch)
    assert (count, fetch) == (1_747, 223_696)
    # At most the count, overshot by the responses that crossed it (one a partition).
    bound = count + PARTITIONS * fetch // record
    planned = _largest_queue(conf, topic)
    # With librdkafka's count and response size (100,000; 1 MiB) only the byte bound holds,
    # and it counts payload only.
    unbounded = _largest_queue({k: v for k, v in conf.items() if k not in PLAN_KEYS}, topic)
    assert planned <= bound, (planned, bound)
    assert unbounded > 2 * bound, (unbounded, bound)  # what the plan's keys prevent


MANY = 16
MANY_PER_PARTITION = 40_000


def test_one_fetch_response_across_many_partitions_is_bounded(
        kafka_bootstrap: str, topic_name: Any) -> None:
    """librdkafka checks its count bound before a fetch, and a fetch asks every partition at
    once; each record of the response becomes a ~450 B op. With its fetch.max.bytes (which
    follows queued.max.messages.kbytes: 41 MiB at the 1 GB budget) 32 partitions of tiny
    records queued +463 MiB against that 41 MiB share. The plan keeps one response to one
    partition's size (1 MiB), each partition's fetch a share of it (so every response
    carries every partition: a 1 MiB response of one partition drained them in turn)."""
    topic = topic_name("many")
    record = _fill(kafka_bootstrap, topic, MANY, MANY_PER_PARTITION)
    job = _job(kafka_bootstrap, topic, budget_mb=1024)  # the default budget
    plain = {k: v for k, v in job.consumer_conf.items()
             if k not in ("error_cb", "logger", SETTINGS_SOURCE)}
    conf = input_fetch_conf(plain, job.memory, MANY, job.user_fetch_bytes, job.user_fetch_max)
    assert (conf["max.partition.fetch.bytes"], conf["fetch.max.bytes"]) == (65_536, 1_048_576)
    bound = job.memory.input_messages + conf["fetch.max.bytes"] // record
    planned = _largest_queue(conf, topic, MANY)
    unbounded = _largest_queue(plain, topic, MANY)  # 1 MiB a partition, librdkafka's whole
    assert planned <= bound, (planned, bound)
    assert unbounded > 2 * bound, (unbounded, bound)  # what fetch.max.bytes prevents

"""``millpond topics create``: create a job's input topics (and named outputs) before it runs.

A job needs its inputs to exist (``task.inputs``); changelogs, the checkpoint topic and
outputs it creates itself. Creating is idempotent: an existing topic is left as it is, and
reported with a warning when its partition count is not the one asked for (task N reads
partition N of every input, so inputs need equal counts).
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from millpond.config import Config
from millpond.kafka.admin import TIMEOUT, TopicAdmin
from millpond.kafka.errors import TopicError
from millpond.ops.errors import TopicCreateError


@dataclass(frozen=True)
class TopicResult:
    """What happened to one topic: ``created`` or ``exists`` (with its partition count)."""

    topic: str
    action: str
    partitions: int
    wanted: int
    replication: int | None = None  # of a created topic

    @property
    def mismatch(self) -> bool:
        return self.partitions != self.wanted

    def describe(self) -> str:
        if self.action == "created":
            return (f"created {self.topic} ({self.partitions} partitions, "
                    f"replication factor {self.replication})")
        text = f"exists  {self.topic} ({self.partitions} partitions)"
        if self.mismatch:
            text += (f"; warning: {self.wanted} were asked for. It was left as it is: change it "
                     "with kafka-topics.sh --alter, or delete it and run this again")
        return text


def job_topics(config: Config, outputs: list[str]) -> list[str]:
    """The job's input topics, then ``outputs`` (``kafka.`` prefixes dropped), without repeats."""
    names = [s.topic for s in config.job.inputs]
    names += [o.removeprefix("kafka.") for o in outputs]
    return list(dict.fromkeys(names))


def create_topics(admin: TopicAdmin, topics: list[str], partitions: int,
                  replication: int | None = None) -> list[TopicResult]:
    """Create each missing topic with ``partitions`` partitions and ``replication`` (default
    min(3, brokers), as for outputs); report existing ones. Raises
    :class:`TopicCreateError` for a topic Kafka refuses, after trying every topic."""
    if partitions < 1:
        raise TopicCreateError(f"--partitions must be at least 1, not {partitions}")
    results: list[TopicResult] = []
    missing: list[str] = []
    failures: list[str] = []
    for topic in topics:
        try:
            have = admin.partition_count(topic)
        except TopicError as exc:  # e.g. a name Kafka refuses
            failures.append(str(exc))
            continue
        if have is None:
            missing.append(topic)
        else:
            results.append(TopicResult(topic, "exists", have, partitions))
    rf = replication or min(3, max(1, admin.broker_count()))
    futures = admin.admin.create_topics([NewTopic(t, partitions, rf) for t in missing],
                                        request_timeout=TIMEOUT) if missing else {}
    for topic in missing:
        try:
            futures[topic].result(timeout=TIMEOUT)
            results.append(TopicResult(topic, "created", partitions, partitions, rf))
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:  # created meanwhile
                have = admin.partition_count(topic) or partitions
                results.append(TopicResult(topic, "exists", have, partitions))
            else:
                failures.append(f"topic {topic}: {err.str()}")
    order = {t: i for i, t in enumerate(topics)}
    results.sort(key=lambda r: order[r.topic])
    if failures:
        done = "; ".join(r.describe() for r in results)
        raise TopicCreateError("could not create " + "; ".join(failures)
                               + (f" (done: {done})" if done else ""))
    return results

"""Where a store's changelog is and how far to read it; Spark DataFrames over offset ranges.

A job's config names the changelog topic and its system's brokers. The end point per
partition is the changelog's end (the LSO under read_committed) or, ``at_checkpoint``, the
changelog offset of the job's last checkpoint plus one (end offsets are exclusive). Offsets
are fixed up front with confluent-kafka so that what Spark reads, the OFFSET files written
and the reported statistics all describe the same ranges.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from millpond.changelog.checkpoint import NO_OFFSET, Checkpoint, checkpoint_topic, task_name
from millpond.changelog.errors import CheckpointError
from millpond.changelog.generations import changelog_topic
from millpond.changelog.guarantees import STATE_ISOLATION
from millpond.job import Job
from millpond.kafka import clients
from millpond.spark.errors import SourceConfigError, SourceError
from millpond.spark.kafka_options import java_kafka_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from millpond.config import Config, StoreConfig

log = logging.getLogger(__name__)

TIMEOUT = 30.0
# librdkafka settings worth passing from systems.<sys>.consumer.* to our own clients.
_CLIENT_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.")


@dataclass(frozen=True)
class Changelog:
    """A store's changelog topic and how to reach it."""

    store: str
    topic: str
    bootstrap: str
    isolation: str  # read_committed: changelogs are written in transactions
    group_id: str  # the job's Spark readers' group (and Spark's group id prefix)
    # librdkafka settings (secrets among them: never in a repr) and explicit Spark options
    client_conf: dict[str, str] = field(default_factory=dict, repr=False)
    spark_options: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class ReadPlan:
    """Offsets to read per partition: ``ranges[p] = (start, end)``, end exclusive."""

    changelog: Changelog
    ranges: dict[int, tuple[int, int]]
    mode: str  # "end" or "checkpoint"
    no_checkpoint: tuple[int, ...] = ()  # partitions whose task never checkpointed

    @property
    def offsets_to_read(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def last_offset(self, partition: int) -> int:
        """The last changelog offset the plan covers for ``partition`` (NO_OFFSET if none)."""
        end = self.ranges[partition][1]
        return end - 1 if end > 0 else NO_OFFSET


def store_config(config: Config, store: str) -> StoreConfig:
    """The configured store ``store``, or SourceError listing the ones that exist."""
    try:
        return config.stores[store]
    except KeyError:
        known = ", ".join(sorted(config.stores)) or "none"
        raise SourceConfigError(f"no store {store!r} in the job config (stores: {known})") from None


def changelog_of(
    config: Config, store: str, spark_options: Mapping[str, str] | None = None,
    resolve_generation: bool = True,
) -> Changelog:
    """Resolve topic, brokers and isolation level of ``store``'s changelog from ``config``;
    the topic is the generation the job's checkpoints name, else the configured one
    (``resolve_generation=False``: the configured one, without reading Kafka)."""
    cfg = store_config(config, store)
    system_name = cfg.changelog.system if cfg.changelog else config.job.changelog_system
    configured = cfg.changelog.topic if cfg.changelog else None
    topic = changelog_topic(config.job.name, config.job.id, store, configured)
    system = config.systems.get(system_name)
    if system is None or not system.bootstrap_servers:
        raise SourceConfigError(
            f"store {store!r}: changelog system {system_name!r} has no brokers; set "
            f"systems.{system_name}.bootstrap.servers (at {config.location(f'systems.{system_name}.bootstrap.servers')})"
        )
    extras = {**system.client,
              **{k: v for k, v in system.consumer.items() if k.startswith(_CLIENT_PREFIXES)}}
    changelog = Changelog(store, topic, system.bootstrap_servers, STATE_ISOLATION,
                          Job(config).spark_group_id, extras, dict(spark_options or {}))
    if not resolve_generation:
        return changelog
    return replace(changelog, topic=current_topic(config, changelog))


def current_topic(config: Config, changelog: Changelog) -> str:
    """The changelog's topic now: the generation the job's checkpoints name (after a
    ``spark rescale``), else the configured topic (also when the job never checkpointed)."""
    from millpond.changelog.errors import GenerationError
    from millpond.changelog.generations import job_topics, resolve

    try:
        checkpoints = read_checkpoints(changelog, checkpoint_topic(config.job.name, config.job.id))
    except SourceError:
        return changelog.topic  # no checkpoint topic (yet): the configured topic
    try:
        return resolve(config, config.stores[changelog.store], job_topics(checkpoints.values()))
    except GenerationError as exc:
        raise SourceError(str(exc)) from exc


def _consumer(changelog: Changelog, isolation: str | None = None) -> Consumer:
    conf: dict[str, Any] = dict(changelog.client_conf)
    conf.update({
        "bootstrap.servers": changelog.bootstrap,
        "group.id": changelog.group_id,  # assigned, never joined: no member, no commit
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": isolation or changelog.isolation,
    })
    return clients.consumer(conf)


def topic_partitions(consumer: Consumer, topic: str) -> list[int]:
    """Partition ids of ``topic``; SourceError if it does not exist."""
    try:
        md = consumer.list_topics(topic, timeout=TIMEOUT).topics.get(topic)
    except KafkaException as exc:
        raise SourceError(f"cannot reach Kafka for topic {topic}: {exc}") from exc
    if md is None or md.error is not None or not md.partitions:
        reason = md.error.str() if md is not None and md.error is not None else "does not exist"
        raise SourceError(f"topic {topic}: {reason}")
    return sorted(md.partitions)


def watermarks(consumer: Consumer, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """(low, high) per partition; high is the LSO for a read_committed consumer."""
    result = {}
    for p in partitions:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)
        except KafkaException as exc:
            raise SourceError(f"cannot read offsets of {topic}[{p}]: {exc}") from exc
        result[p] = (int(low), int(high))
    return result


def plan_to_end(changelog: Changelog) -> ReadPlan:
    """Read every partition from its first offset to its current end."""
    consumer = _consumer(changelog)
    try:
        parts = topic_partitions(consumer, changelog.topic)
        return ReadPlan(changelog, watermarks(consumer, changelog.topic, parts), "end")
    finally:
        consumer.close()


def plan_to_checkpoint(config: Config, changelog: Changelog) -> ReadPlan:
    """Read every partition up to the changelog offset in the job's last checkpoint."""
    ckpt_topic = checkpoint_topic(config.job.name, config.job.id)
    try:
        checkpoints = read_checkpoints(changelog, ckpt_topic)
    except SourceError as exc:
        raise SourceError(f"cannot read job {config.job.name!r}'s checkpoints (has it ever "
                          f"committed?): {exc}") from exc
    consumer = _consumer(changelog)
    try:
        parts = topic_partitions(consumer, changelog.topic)
        marks = watermarks(consumer, changelog.topic, parts)
    finally:
        consumer.close()
    ranges: dict[int, tuple[int, int]] = {}
    missing = []
    for p in parts:
        low, high = marks[p]
        checkpoint = checkpoints.get(task_name(p))
        if checkpoint is None:
            missing.append(p)
        offset = checkpoint.changelogs.get(changelog.store, NO_OFFSET) if checkpoint else NO_OFFSET
        end = offset + 1 if offset != NO_OFFSET else low
        if end > high:
            raise SourceError(
                f"changelog {changelog.topic}[{p}] ends at offset {high} but the last "
                f"checkpoint of task {task_name(p)} says store {changelog.store!r} wrote offset "
                f"{offset}: the topic was deleted, recreated or truncated"
            )
        if end < low:
            raise SourceError(
                f"changelog {changelog.topic}[{p}] starts at offset {low}, after the checkpointed "
                f"offset {offset} of store {changelog.store!r}: records it needs were deleted"
            )
        ranges[p] = (low, end)
    return ReadPlan(changelog, ranges, "checkpoint", tuple(missing))


def read_checkpoints(
    changelog: Changelog, topic: str, timeout: float = TIMEOUT
) -> dict[str, Checkpoint]:
    """The latest checkpoint of every task in the compacted checkpoint ``topic``."""
    consumer = _consumer(changelog, isolation="read_committed")
    latest: dict[str, Checkpoint] = {}
    try:
        parts = topic_partitions(consumer, topic)
        marks = watermarks(consumer, topic, parts)
        pending = {p for p, (low, high) in marks.items() if high > low}
        consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in sorted(pending)])
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise SourceError(
                    f"timed out after {timeout:.0f}s reading checkpoint topic {topic} "
                    f"(partitions still unread: {sorted(pending)})"
                )
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            p = msg.partition()
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(p)
                    continue
                raise SourceError(f"reading checkpoint topic {topic}[{p}]: {err.str()}")
            offset = msg.offset()
            if offset is not None and p is not None and offset + 1 >= marks[p][1]:
                pending.discard(p)
            key = msg.key()
            if key is None:
                continue
            name = key.decode(errors="replace")
            value = msg.value()
            if value is None:
                latest.pop(name, None)
                continue
            try:
                latest[name] = Checkpoint.from_bytes(value, where=f"{topic}[{p}]@{offset}")
            except CheckpointError as exc:
                raise SourceError(str(exc)) from exc
    finally:
        consumer.close()
    return latest


def offsets_json(topic: str, offsets: Mapping[int, int]) -> str:
    """Spark's per-partition offsets option: ``{"topic": {"0": 23, "1": -2}}``."""
    return json.dumps({topic: {str(p): int(o) for p, o in sorted(offsets.items())}})


def kafka_options(changelog: Changelog) -> dict[str, str]:
    """The Spark Kafka source's options for ``changelog``: its brokers and isolation level,
    the job's connection settings in the Java client's words (:mod:`.kafka_options`), the
    job's group id prefix, and the caller's own options over all of them. They hold the
    job's secrets: give them to Spark through the driver (``.options()``), never argv."""
    options = {
        "kafka.bootstrap.servers": changelog.bootstrap,
        "kafka.isolation.level": changelog.isolation,
        # Compaction leaves gaps and transactions leave markers: neither is data loss here.
        "failOnDataLoss": "false",
        # Bulk reads: fewer, larger fetches than the consumer defaults (1 MiB per partition).
        "kafka.max.partition.fetch.bytes": str(8 << 20),
        "kafka.fetch.max.bytes": str(64 << 20),
        # Spark's consumers are assigned partitions, never join a group nor commit; their
        # generated group ids (<prefix>-<uuid>-...) are the job's, for a prefixed ACL.
        "groupIdPrefix": changelog.group_id,
    }
    translated = java_kafka_options(changelog.client_conf, given=changelog.spark_options)
    if translated:
        log.debug("Spark's Kafka client gets the job's settings as %s", ", ".join(translated))
    options.update(translated)
    options.update(changelog.spark_options)
    return options


RAW_COLUMNS = ("partition", "offset", "timestamp", "key", "value")


def read_range(spark: SparkSession, plan: ReadPlan) -> DataFrame:
    """A batch DataFrame of the plan's records: partition, offset, timestamp, key, value."""
    topic = plan.changelog.topic
    reader = spark.read.format("kafka").options(**kafka_options(plan.changelog))
    reader = reader.option("assign", json.dumps({topic: sorted(plan.ranges)}))
    reader = reader.option("startingOffsets", offsets_json(topic, {p: s for p, (s, _) in plan.ranges.items()}))
    reader = reader.option("endingOffsets", offsets_json(topic, {p: e for p, (_, e) in plan.ranges.items()}))
    return reader.load().select(*RAW_COLUMNS)


def read_stream(
    spark: SparkSession, changelog: Changelog, max_records_per_batch: int | None = None
) -> DataFrame:
    """A streaming DataFrame over the whole changelog, from its first offset."""
    reader = spark.readStream.format("kafka").options(**kafka_options(changelog))
    reader = reader.option("subscribe", changelog.topic).option("startingOffsets", "earliest")
    if max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(max_records_per_batch))
    return reader.load().select(*RAW_COLUMNS)

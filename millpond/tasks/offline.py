"""Operations on a job's state while the job is stopped: restore, inspect, checkpoints.

These back the ``millpond restore|checkpoint|changelog|store`` commands. They take the
same store locks as a running task, so they refuse to touch a store a job has open.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from millpond.changelog import local
from millpond.changelog.admin import TopicAdmin
from millpond.changelog.checkpoint import (
    Checkpoint,
    checkpoint_topic,
    read_checkpoints,
    read_offset_file,
    task_name,
)
from millpond.changelog.errors import ChangelogError, CheckpointError
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.producer import TrackedProducer
from millpond.changelog.restore import RestoreListener, RestoreStats, restore_consumer
from millpond.config import Config, StoreConfig
from millpond.tasks.storage import TaskStorage, open_engine, serdes_for, store_topic


class Job:
    """Kafka clients and names of one job, for offline tools."""

    def __init__(self, config: Config) -> None:
        self.config = config
        system = config.systems.get("kafka")
        bootstrap = system.bootstrap_servers if system else None
        if not bootstrap:
            raise ChangelogError("systems.kafka.bootstrap.servers is not set")
        self.client_conf: dict[str, Any] = {"bootstrap.servers": bootstrap}
        self.consumer_conf = {**self.client_conf, **(system.consumer if system else {})}
        self.producer_conf = {**self.client_conf, **(system.producer if system else {})}
        self.guarantee = Guarantee(config.job.processing_guarantee)
        self.checkpoint_topic = checkpoint_topic(config.job.name, config.job.id)
        self.admin = TopicAdmin(self.client_conf)

    def consumer(self) -> Consumer:
        return restore_consumer(self.consumer_conf, self.guarantee.isolation)

    def store(self, name: str) -> StoreConfig:
        try:
            return self.config.stores[name]
        except KeyError:
            known = ", ".join(sorted(self.config.stores)) or "none"
            raise ChangelogError(f"no store {name!r} in the config (stores: {known})") from None

    def stores(self, only: str | None) -> list[StoreConfig]:
        return [self.store(only)] if only else list(self.config.stores.values())

    def partitions(self, store: StoreConfig) -> list[int]:
        """The store's partitions: its changelog's, else the first input's."""
        topic = store_topic(self.config, store) if store.changelog else self.config.job.inputs[0].topic
        n = self.admin.partition_count(topic)
        if n is None:
            raise ChangelogError(f"topic {topic} of store {store.name} does not exist")
        return list(range(n))

    def partitions_of_inputs(self) -> list[int]:
        """Task partitions: the first input's partitions."""
        topic = self.config.job.inputs[0].topic
        n = self.admin.partition_count(topic)
        if n is None:
            raise ChangelogError(f"input topic {topic} does not exist")
        return list(range(n))

    def checkpoints(self) -> dict[str, Checkpoint]:
        consumer = self.consumer()
        try:
            if self.admin.partition_count(self.checkpoint_topic) is None:
                return {}
            return read_checkpoints(consumer, self.checkpoint_topic)
        finally:
            consumer.close()


def restore(
    job: Job, store: str | None = None, partitions: list[int] | None = None, full: bool = False,
    listener: RestoreListener | None = None,
) -> list[RestoreStats]:
    """Rebuild local stores from their changelogs as the job's guarantee prescribes."""
    results: list[RestoreStats] = []
    checkpoints = job.checkpoints()
    producer = TrackedProducer(job.producer_conf)
    consumer = job.consumer()
    try:
        for cfg in job.stores(store):
            if cfg.changelog is None:
                continue
            for p in partitions if partitions is not None else job.partitions(cfg):
                live = local.store_dir(job.config.job.logged_store_base_dir, job.config.job.name,
                                       cfg.name, p)
                if full:
                    local.wipe(live)
                    local.wipe(local.checkpoint_dir(live))
                ckpt = checkpoints.get(task_name(p))
                storage = TaskStorage.open(job.config, p, job.guarantee, producer, consumer,
                                           ckpt.changelogs if ckpt else None, listener,
                                           only=cfg.name)
                try:
                    storage.after_commit()
                    rec = storage.stores[cfg.name].recovery
                    if rec is not None:
                        results.append(rec.stats)
                finally:
                    storage.close()
        producer.flush_and_check()
    finally:
        consumer.close()
    return results


def set_checkpoint(job: Job, partition: int, inputs: dict[str, int]) -> Checkpoint:
    """Overwrite a task's input offsets in the checkpoint topic (job must be stopped)."""
    if _group_active(job):
        raise CheckpointError(
            f"job {job.config.job.name} has live members in consumer group "
            f"{job.config.job.name}-{job.config.job.id}; stop every process before setting "
            "checkpoints")
    current = job.checkpoints().get(task_name(partition))
    ckpt = Checkpoint(task_name(partition), partition,
                      {**(current.inputs if current else {}), **inputs},
                      dict(current.changelogs) if current else {})
    job.admin.ensure_compacted(job.checkpoint_topic, len(job.partitions_of_inputs()),
                               what="checkpoint")
    producer = TrackedProducer(job.producer_conf)
    producer.send(job.checkpoint_topic, partition, ckpt.task.encode(), ckpt.to_bytes())
    producer.flush_and_check()
    return ckpt


def _group_active(job: Job) -> bool:
    group = f"{job.config.job.name}-{job.config.job.id}"
    futures = job.admin.admin.describe_consumer_groups([group])
    try:
        desc = futures[group].result(timeout=30)
    except Exception:
        return False
    return bool(desc.members)


@dataclass
class PartitionInfo:
    """One row of ``changelog describe``."""

    store: str
    topic: str
    partition: int
    low: int
    high: int
    local_offset: int | None
    checkpointed: int | None

    @property
    def lag(self) -> int | None:
        """Changelog records the local store has not applied."""
        return None if self.local_offset is None else max(0, self.high - 1 - self.local_offset)


def describe(job: Job, store: str | None = None) -> tuple[list[PartitionInfo], dict[str, dict[str, str]]]:
    """Per store partition: watermarks, the local OFFSET and the checkpointed offset."""
    rows: list[PartitionInfo] = []
    settings: dict[str, dict[str, str]] = {}
    checkpoints = job.checkpoints()
    consumer = job.consumer()
    try:
        for cfg in job.stores(store):
            if cfg.changelog is None:
                continue
            topic = store_topic(job.config, cfg)
            conf = job.admin.topic_config(topic)
            settings[topic] = {k: conf[k] for k in ("cleanup.policy", "min.compaction.lag.ms",
                                                    "segment.bytes", "retention.ms") if k in conf}
            for p in job.partitions(cfg):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                live = local.store_dir(job.config.job.logged_store_base_dir,
                                       job.config.job.name, cfg.name, p)
                so = read_offset_file_quiet(live)
                ckpt = checkpoints.get(task_name(p))
                rows.append(PartitionInfo(cfg.name, topic, p, int(low), int(high),
                                          so.offset if so else None,
                                          ckpt.changelogs.get(cfg.name) if ckpt else None))
    finally:
        consumer.close()
    return rows, settings


def read_store(
    job: Job, store: str, partitions: list[int] | None = None, keys: list[str] | None = None,
    start: str | None = None, end: str | None = None, raw: bool = False,
) -> Iterator[tuple[int, Any, Any]]:
    """Yield (partition, key, value) of a stopped job's local store, decoded with its serdes
    (or as raw bytes with ``raw``)."""
    cfg = job.store(store)
    key_serde, msg_serde = serdes_for(job.config, cfg)
    if raw:
        from millpond.serdes.builtins import BytesSerde

        msg_serde = BytesSerde()
    parts = partitions if partitions is not None else job.partitions(cfg)
    for p in parts:
        live = local.store_dir(job.config.job.logged_store_base_dir, job.config.job.name,
                               cfg.name, p)
        if not live.exists():
            continue
        lock = local.StoreLock(live)
        lock.acquire()
        if read_offset_file_quiet(live) is None:
            warnings.warn(
                f"{live} holds writes after the last commit (the job stopped uncleanly); "
                "run `millpond restore` first to see the committed state", stacklevel=2)
        engine = open_engine(cfg, live)
        try:
            if keys is not None:
                for text in keys:
                    key = _parse_key(key_serde, text)
                    data = engine.get(key_serde.to_bytes(key))
                    yield p, key, None if data is None else msg_serde.from_bytes(data)
                continue
            if start is not None or end is not None:
                lo = key_serde.to_bytes(_parse_key(key_serde, start)) if start is not None else b""
                hi = key_serde.to_bytes(_parse_key(key_serde, end)) if end is not None else b"\xff" * 64
                it = engine.range(lo, hi)
            else:
                it = engine.all()
            with it:
                for k, v in it:
                    yield p, k if raw else key_serde.from_bytes(k), msg_serde.from_bytes(v)
        finally:
            engine.close()
            lock.release()


def read_offset_file_quiet(live: Any) -> Any:
    try:
        return read_offset_file(live)
    except CheckpointError:
        return None


def _parse_key(serde: Any, text: str) -> Any:
    """Turn a command-line key into the serde's type (numbers for integer/long serdes)."""
    name = getattr(serde, "name", "")
    if name in ("integer", "long"):
        return int(text)
    if name == "double":
        return float(text)
    if name == "bytes":
        return text.encode()
    if name == "json":
        import json

        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def reseed_from_local(job: Job, store: str | None = None) -> dict[str, int]:
    """Write every local entry back to an emptied changelog and re-point the checkpoints.

    For a changelog deleted or truncated while the job was down: the local stores are
    the only copy of the state, so they become the changelog's content again.
    Returns records written per store.
    """
    from millpond.changelog.checkpoint import StoreOffset, write_offset_file
    from millpond.changelog.recovery import local_start

    checkpoints = job.checkpoints()
    producer = TrackedProducer(job.producer_conf)
    written: dict[str, int] = {}
    updated: dict[int, Checkpoint] = {}
    for cfg in job.stores(store):
        if cfg.changelog is None or cfg.factory == "inmemory":
            continue
        topic = store_topic(job.config, cfg)
        parts = job.partitions_of_inputs()
        job.admin.ensure_compacted(topic, len(parts), cfg.changelog_replication_factor,
                                   cfg.changelog_topic_config)
        for p in parts:
            live = local.store_dir(job.config.job.logged_store_base_dir, job.config.job.name,
                                   cfg.name, p)
            lock = local.StoreLock(live)
            lock.acquire()
            try:
                if local_start(live, topic, p) is None:
                    raise ChangelogError(f"no usable local state for {cfg.name} partition {p} "
                                         f"in {live}; nothing to re-seed from")
                engine = open_engine(cfg, live)
                try:
                    n = 0
                    with engine.all() as entries:
                        for key, value in entries:
                            producer.send(topic, p, key, value)
                            n += 1
                    producer.flush_and_check()
                    last = producer.last_offset(topic, p)
                    offset = -1 if last is None else last
                    written[cfg.name] = written.get(cfg.name, 0) + n
                    tmp = live.with_name(live.name + ".reseed")
                    local.wipe(tmp)
                    engine.checkpoint(tmp)
                    so = StoreOffset(cfg.name, topic, p, offset)
                    write_offset_file(tmp, so)
                    local.install_checkpoint(tmp, live)
                    write_offset_file(live, so)
                finally:
                    engine.close()
            finally:
                lock.release()
            ckpt = updated.get(p) or checkpoints.get(task_name(p)) or Checkpoint(task_name(p), p)
            ckpt.changelogs[cfg.name] = offset
            updated[p] = ckpt
    for ckpt in updated.values():
        producer.send(job.checkpoint_topic, ckpt.partition, ckpt.task.encode(), ckpt.to_bytes())
    producer.flush_and_check()
    return written

"""The objects one job needs wherever it runs: in a container, behind the CLI, in Spark.

:class:`Job` builds them from the config in one place: the Kafka client settings (consumer
and producer settings on top of the shared ones), the guarantee, the consumer group and
checkpoint topic names, the topic admin, and where each store's changelog is now.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

from confluent_kafka import Consumer

from millpond.changelog.checkpoint import Checkpoint, checkpoint_topic, read_checkpoints
from millpond.changelog.errors import ChangelogRefusedError
from millpond.changelog.generations import job_topics, resolve
from millpond.changelog.guarantees import STATE_ISOLATION, Guarantee
from millpond.config import Config, StoreConfig
from millpond.config.memory import (
    FETCH_BYTES_KEY,
    FETCH_MAX_KEY,
    QUEUED_MESSAGES_KEY,
    fetch_max_bytes,
)
from millpond.kafka.admin import TopicAdmin
from millpond.kafka.clients import (
    OFFSET_RESET_SPELLINGS,
    SETTINGS_SOURCE,
    LibrdkafkaLog,
    SettingSources,
)
from millpond.kafka.faults import ClientFaults
from millpond.kafka.reading import restore_consumer, set_batch_bytes
from millpond.partitioner import librdkafka_setting
from millpond.stores.cached import use_cache_budget
from millpond.stores.engines.rocksdb_options import use_process_memory

# librdkafka waits up to 10 s between attempts to reach a broker that was away (Kafka's Java
# client: 1 s); after a broker restart that alone delays resuming by up to 10 s. Its first
# wait, reconnect.backoff.ms (100 ms), also spaces a new client's connections: once the
# bootstrap connection has named the brokers, it is closed and a request made meanwhile waits
# ~half that (50 ms) for the connection to the broker itself ("still suppressed for 49ms"),
# in every new client (admin, group consumer, each task's producer). 10 ms: ~11 ms there.
CLIENT_DEFAULTS: dict[str, Any] = {"reconnect.backoff.max.ms": 1000,
                                   "reconnect.backoff.ms": 10}


class Job:
    """One job's Kafka client settings, guarantee, names and admin, and its stores' topics.

    Every client made from these settings reports to :attr:`faults` (librdkafka's
    ``error_cb`` and ``FAIL`` log lines): a fatal error, or a failure to authenticate, to
    set up TLS or to speak the listener's protocol, is kept there to be raised."""

    def __init__(self, config: Config) -> None:
        self.config = config
        # Where each librdkafka setting was set: a client's refused settings name it.
        self.setting_source = SettingSources(
            {k: config.location(k) for k in config.properties if k.startswith("systems.kafka.")})
        bootstrap = config.bootstrap_servers("kafka")
        system = config.systems.get("kafka")
        self.group_id = f"{config.job.name}-{config.job.id}"
        shared = dict(system.client) if system else {}
        self.faults = ClientFaults(self.group_id, bootstrap or "", "kafka",
                                   shared.get("ssl.ca.location"))
        self.client_conf: dict[str, Any] = {**CLIENT_DEFAULTS, **shared,
                                            "bootstrap.servers": bootstrap,
                                            "error_cb": self.faults.on_client_error,
                                            "logger": LibrdkafkaLog(listener=self.faults.on_log),
                                            SETTINGS_SOURCE: self.setting_source}
        self.consumer_conf = {**self.client_conf, **(system.consumer if system else {})}
        reset = str(self.consumer_conf.get("auto.offset.reset", "")).strip().lower()
        if reset in OFFSET_RESET_SPELLINGS:  # librdkafka's spelling of Samza's and Kafka's (none: error)
            self.consumer_conf["auto.offset.reset"] = OFFSET_RESET_SPELLINGS[reset]
        self.producer_conf = {**self.client_conf, "partitioner": librdkafka_setting(config.job.partitioner),
                              **(system.producer if system else {})}
        # The memory plan's client buffers, unless the user's systems.kafka.* keys set them.
        memory = config.memory
        self.memory = memory
        self.consumer_conf.setdefault("queued.max.messages.kbytes",
                                      max(1, memory.input_prefetch // 1024))
        # The user's systems.kafka.consumer.queued.min.messages wins, for every consumer.
        self.user_queued_messages = QUEUED_MESSAGES_KEY in self.consumer_conf
        self.consumer_conf.setdefault(QUEUED_MESSAGES_KEY, memory.input_messages)
        self.user_fetch_bytes = FETCH_BYTES_KEY in self.consumer_conf
        self.consumer_conf.setdefault(FETCH_BYTES_KEY, memory.input_fetch_bytes)
        # The input consumer's fetch sizes for its partitions are set by the container once it
        # knows how many the process may hold (millpond.tasks.container.input_fetch_conf).
        self.user_fetch_max = FETCH_MAX_KEY in self.consumer_conf
        self.producer_conf.setdefault("queue.buffering.max.kbytes",
                                      max(1, memory.producer_buffer // 1024))
        set_batch_bytes(memory.restore_batch)
        # One block cache, write-buffer manager and object-cache budget for the process.
        use_process_memory(memory.block_cache, memory.write_buffers, memory.memtable)
        use_cache_budget(memory.object_caches)
        self.guarantee = Guarantee(config.job.processing_guarantee)
        self.checkpoint_topic = checkpoint_topic(config.job.name, config.job.id)

    @cached_property
    def admin(self) -> TopicAdmin:
        """The job's topic admin (made on first use)."""
        return TopicAdmin(self.client_conf, self.faults, probe_topic=self.checkpoint_topic)

    @property
    def reader_group_id(self) -> str:
        """The group id of the job's bulk readers (restore, checkpoints, status): they are
        assigned partitions and never join or commit, but librdkafka needs one, and one of
        the job's own keeps a least-privilege ACL to the job's prefix."""
        return f"{self.group_id}-reader"

    @property
    def spark_group_id(self) -> str:
        """The group id of the spark commands' readers (millpond's, assigned and never
        joined) and the prefix of Spark's own consumers' generated group ids."""
        return f"{self.group_id}-spark"

    @property
    def rescale_transactional_id(self) -> str:
        """The transactional id ``spark rescale`` commits the new checkpoints with: under
        the job's prefix, apart from its tasks' ``<group>-partition-N``."""
        return f"{self.group_id}-rescale"

    def restore_conf(self) -> dict[str, Any]:
        """The bulk-read consumer's settings: the job's, under its own group id, with the
        memory plan's restore prefetch (bytes and count) and fetch sizes unless the user's
        keys set them."""
        conf = {**self.consumer_conf, "group.id": self.reader_group_id}
        if not self.memory.user_input_prefetch:  # the restore's own prefetch bound
            conf["queued.max.messages.kbytes"] = max(1, self.memory.restore_prefetch // 1024)
        if not self.user_queued_messages:
            conf[QUEUED_MESSAGES_KEY] = self.memory.restore_messages
        if not self.user_fetch_bytes:  # the restore's own, not the input's
            conf[FETCH_BYTES_KEY] = self.memory.restore_partition_fetch_bytes
        if not self.user_fetch_max:
            conf[FETCH_MAX_KEY] = fetch_max_bytes(self.memory.restore_fetch_bytes, conf)
            if not self.user_fetch_bytes:  # a partition's fetch within the whole one
                conf[FETCH_BYTES_KEY] = min(conf[FETCH_BYTES_KEY], conf[FETCH_MAX_KEY])
        return conf

    def consumer(self) -> Consumer:
        """A new bulk-read consumer (no group joined) that sees committed state only."""
        return restore_consumer(self.restore_conf(), STATE_ISOLATION)

    def store(self, name: str) -> StoreConfig:
        try:
            return self.config.stores[name]
        except KeyError:
            known = ", ".join(sorted(self.config.stores)) or "none"
            raise ChangelogRefusedError(f"no store {name!r} in the config (stores: {known})") from None

    def stores(self, only: str | None) -> list[StoreConfig]:
        return [self.store(only)] if only else list(self.config.stores.values())

    def changelog(self, store: StoreConfig, checkpoints: Mapping[str, Checkpoint] | None = None,
                  ) -> str:
        """The store's changelog topic now: the checkpoints' generation, else the configured
        one (``checkpoints``: the job's, read here if not given)."""
        if checkpoints is None:
            checkpoints = self.checkpoints()
        return resolve(self.config, store, job_topics(checkpoints.values()))

    def partitions(self, store: StoreConfig) -> list[int]:
        """The store's partitions: its changelog's, else the first input's."""
        topic = self.changelog(store) if store.changelog else self.config.job.inputs[0].topic
        n = self.admin.partition_count(topic)
        if n is None:
            raise ChangelogRefusedError(f"topic {topic} of store {store.name} does not exist")
        return list(range(n))

    def partitions_of_inputs(self) -> list[int]:
        """Task partitions: the first input's partitions."""
        topic = self.config.job.inputs[0].topic
        n = self.admin.partition_count(topic)
        if n is None:
            raise ChangelogRefusedError(f"input topic {topic} does not exist; create it with "
                                 "`millpond topics create --config ... --partitions N`")
        return list(range(n))

    def checkpoints(self, lenient: bool = False) -> dict[str, Checkpoint]:
        """Every task's latest checkpoint (:func:`~millpond.changelog.checkpoint.
        read_checkpoints`; ``lenient``: a task whose only checkpoint is unreadable is left out
        with a warning instead of raising)."""
        consumer = self.consumer()
        try:
            if self.admin.partition_count(self.checkpoint_topic) is None:
                return {}
            return read_checkpoints(consumer, self.checkpoint_topic, lenient=lenient)
        finally:
            consumer.close()

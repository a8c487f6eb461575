"""The fate of every key in Samza's configuration table: supported, mapped, ignored or refused.

``SAMZA_KEYS`` lists the keys of Samza's configuration table (docs/learn/documentation/
versioned/jobs/samza-configurations.md, plus the few keys real Samza configs set that the
table leaves out), each with what millpond does with it:

* ``supported``: same meaning as in Samza;
* ``mapped``: translated (to librdkafka, to RocksDB, to a changelog topic config, to another
  millpond key);
* ``ignored``: accepted and logged once at INFO with the reason (YARN, ZooKeeper, metrics
  classes, Java-only settings, ...); a ``${NAME}`` placeholder in such a key is never resolved,
  so it never stops a job;
* ``refused``: accepting it would silently change what the job computes, so loading fails.

``docs/samza-keys.md`` is generated from this table (``python -m millpond.config.samza_keys``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from millpond.config.patterns import key_regex
from millpond.config.properties import Properties
from millpond.config.systems import client_key_reason
from millpond.config.values import describe, error

log = logging.getLogger("millpond.config")

Fate = Literal["supported", "mapped", "ignored", "refused"]

# In patterns, <stream> and <topic> match names with dots, other <...> one dotted part, and
# a trailing * anything.
_WIDE = ("<stream>", "<stream-id>", "<topic>")


@dataclass(frozen=True)
class SamzaKey:
    """One row of Samza's configuration table and what millpond does with it."""

    pattern: str
    fate: Fate
    note: str
    section: str

    @property
    def regex(self) -> re.Pattern[str]:
        return key_regex(self.pattern, _WIDE)




_YARN = "YARN deployment: millpond runs where `millpond run` is started"
_CLUSTER = "cluster manager: scale out by starting more `millpond run` processes"
_COORD = ("job coordinator: millpond coordinates through the Kafka consumer group "
          "(cooperative-sticky) and its checkpoint topic")
_METRICS = ("metrics reporters are Java classes; millpond serves Prometheus metrics "
            "(metrics.reporters=prometheus)")
_OTHER_SYSTEM = "a non-Kafka system: millpond reads and writes Kafka only"
_REWRITER = "config rewriters are Java classes run at submission; use --config-override"
_ASYNC = "AsyncStreamTask setting: millpond calls process() one message at a time"
_JAVA = "Java/JVM setting"
_CKPT = ("millpond checkpoints to its own compacted topic __millpond_checkpoint_<job>_<id>, "
         "inside each task's transaction")
_GROUP = "millpond always groups by partition: task N owns partition N of every input"
_STREAM = "per-stream setting of Samza's stream descriptors"

_ROWS: list[tuple[str, Fate, str, str]] = [
    # --- application
    ("app.name", "mapped", "job.name when job.name is not set", "application"),
    ("app.id", "mapped", "job.id when job.id is not set", "application"),
    ("app.class", "ignored", "a Samza application class is ignored when task.class is set, "
     "refused without it; app.class=<module>:<attribute> names a millpond.streams app",
     "application"),
    ("job.factory.class", "ignored", _YARN, "application"),
    ("job.name", "supported", "the consumer group is <job.name>-<job.id>", "application"),
    ("job.id", "supported", "default 1", "application"),
    ("job.default.system", "ignored",
     "millpond's system is `kafka`: a bare topic name means kafka.<topic>", "application"),
    ("task.class", "supported", "a Python millpond.StreamTask class, package.module.Class",
     "application"),
    ("job.host-affinity.enabled", "ignored",
     "a process keeps its stores on local disk; systems.kafka.consumer.group.instance.id "
     "(static membership) gives a restarted process its partitions back", "application"),
    ("job.jmx.enabled", "ignored", "JMX is Java-only", "application"),
    ("task.window.ms", "supported", "", "application"),
    ("task.log4j.system", "ignored", "log4j is Java-only; millpond logs with Python logging",
     "application"),
    ("serializers.registry.<serde>.class", "supported",
     "Samza's serde factory classes (Samza's byte layouts), a built-in name or a Python class",
     "application"),
    ("serializers.registry.<serde>.*", "supported",
     "serde parameters, e.g. encoding for StringSerdeFactory", "application"),
    ("job.config.loader.factory", "ignored", "millpond reads the file given to --config",
     "application"),
    ("job.config.loader.properties.path", "ignored", "millpond reads the file given to --config",
     "application"),
    # --- advanced application
    ("job.changelog.system", "supported",
     "system of bare changelog names; also gives stores without a changelog one named "
     "<job>-<id>-<store>-changelog", "advanced"),
    ("job.coordinator.system", "ignored", _COORD, "advanced"),
    ("job.coordinator.segment.bytes", "ignored", _COORD, "advanced"),
    ("job.coordinator.replication.factor", "ignored", _COORD, "advanced"),
    ("job.coordinator.monitor-partition-change.frequency.ms", "ignored", _COORD, "advanced"),
    ("job.coordinator.execute", "ignored", _COORD, "advanced"),
    ("job.config.rewriter.<rewriter>.class", "ignored", _REWRITER, "advanced"),
    ("job.config.rewriters", "ignored", _REWRITER, "advanced"),
    ("job.config.rewriter.<rewriter>.system", "ignored", _REWRITER, "advanced"),
    ("job.config.rewriter.<rewriter>.regex", "ignored", _REWRITER, "advanced"),
    ("job.config.rewriter.<rewriter>.config.*", "ignored", _REWRITER, "advanced"),
    ("job.container.thread.pool.size", "ignored", _ASYNC, "advanced"),
    ("job.systemstreampartition.grouper.factory", "ignored", _GROUP, "advanced"),
    ("job.systemstreampartition.matcher.class", "ignored", _GROUP, "advanced"),
    ("job.systemstreampartition.matcher.config.range", "ignored", _GROUP, "advanced"),
    ("job.systemstreampartition.matcher.config.regex", "ignored", _GROUP, "advanced"),
    ("job.systemstreampartition.matcher.config.job.factory.regex", "ignored", _GROUP,
     "advanced"),
    ("job.systemstreampartition.input.expansion.enabled", "ignored",
     "inputs need equal partition counts; a changed count needs a new job", "advanced"),
    ("job.security.manager.factory", "ignored", _YARN, "advanced"),
    ("task.callback.timeout.ms", "ignored", _ASYNC, "advanced"),
    ("task.callback.watermark.timeout.ms", "ignored", _ASYNC, "advanced"),
    ("task.chooser.class", "ignored",
     "message choosers are Java classes; inputs are read in the consumer's fetch order",
     "advanced"),
    ("task.command.class", "ignored", _YARN, "advanced"),
    ("task.drop.deserialization.errors", "supported", "see also task.dlq.stream", "advanced"),
    ("task.drop.serialization.errors", "ignored",
     "a value that does not serialize always stops the job before the commit", "advanced"),
    ("task.drop.producer.errors", "ignored",
     "a delivery error always stops the job before the commit (nothing is dropped)", "advanced"),
    ("task.ignored.exceptions", "ignored",
     "an exception from process() stops the job (see task.dlq.stream for bad input)",
     "advanced"),
    ("task.log4j.location.info.enabled", "ignored", "log4j is Java-only", "advanced"),
    ("task.max.idle.ms", "ignored", _ASYNC, "advanced"),
    ("task.max.concurrency", "ignored", _ASYNC, "advanced"),
    ("task.name.grouper.factory", "ignored", _GROUP, "advanced"),
    ("task.opts", "ignored", _JAVA, "advanced"),
    ("task.poll.interval.ms", "ignored", "the run loop polls librdkafka continuously",
     "advanced"),
    ("task.shutdown.ms", "ignored",
     "shutdown finishes the current batch and commits; a second signal exits at once",
     "advanced"),
    # --- checkpointing
    ("task.checkpoint.factory", "ignored", _CKPT, "checkpointing"),
    ("task.commit.ms", "supported", "unset under exactly-once: 100 ms, as Kafka Streams", "checkpointing"),
    ("task.checkpoint.system", "ignored", _CKPT, "checkpointing"),
    ("job.checkpoint.validation.enabled", "ignored", _CKPT, "checkpointing"),
    ("task.checkpoint.path", "ignored", _CKPT, "checkpointing"),
    ("task.checkpoint.replication.factor", "ignored",
     _CKPT + "; its replication is min(3, brokers)", "checkpointing"),
    ("task.checkpoint.segment.bytes", "ignored", _CKPT, "checkpointing"),
    # --- systems and streams
    ("task.inputs", "supported", "kafka.<topic>[,...]; inputs need equal partition counts",
     "streams"),
    ("task.broadcast.inputs", "refused",
     "millpond has no broadcast inputs: every task would miss their messages", "streams"),
    ("systems.<system>.samza.factory", "ignored",
     "every millpond system is Kafka, reached through librdkafka", "streams"),
    ("systems.<system>.default.stream.samza.key.serde", "mapped",
     "systems.<system>.samza.key.serde", "streams"),
    ("systems.<system>.default.stream.samza.msg.serde", "mapped",
     "systems.<system>.samza.msg.serde", "streams"),
    ("systems.<system>.default.stream.samza.offset.default", "ignored",
     "a task without a checkpoint starts at the oldest offset (Samza's `oldest`)", "streams"),
    ("systems.<system>.default.stream.*", "ignored",
     "millpond creates only changelog, checkpoint and output topics "
     "(see stores.<store>.changelog.kafka.*)", "streams"),
    ("streams.<stream-id>.samza.system", "mapped",
     "where streams.<stream-id>.samza.key.serde/msg.serde apply", "streams"),
    ("streams.<stream-id>.samza.physical.name", "mapped",
     "the topic streams.<stream-id>.samza.key.serde/msg.serde apply to (default: the id)",
     "streams"),
    ("streams.<stream-id>.samza.key.serde", "mapped",
     "systems.<system>.streams.<topic>.samza.key.serde", "streams"),
    ("streams.<stream-id>.samza.msg.serde", "mapped",
     "systems.<system>.streams.<topic>.samza.msg.serde", "streams"),
    ("streams.<stream-id>.samza.offset.default", "ignored",
     "a task without a checkpoint starts at the oldest offset (Samza's `oldest`)", "streams"),
    ("streams.<stream-id>.samza.delete.committed.messages", "ignored",
     "intermediate streams belong to high-level applications", "streams"),
    ("streams.<stream-id>.samza.reset.offset", "ignored",
     "a task resumes from its checkpoint; move it with `millpond checkpoint set`", "streams"),
    ("streams.<stream-id>.samza.priority", "ignored",
     "inputs are read in the consumer's fetch order", "streams"),
    ("streams.<stream-id>.samza.bootstrap", "ignored",
     "inputs are read in the consumer's fetch order (side inputs are bootstrapped)",
     "streams"),
    ("streams.<stream-id>.samza.broadcast", "refused",
     "millpond has no broadcast streams: every task would miss their messages", "streams"),
    ("streams.<stream-id>.*", "ignored", _STREAM, "streams"),
    ("task.consumer.batch.size", "ignored", "librdkafka batches fetches itself", "streams"),
    # --- Kafka
    ("systems.<system>.consumer.zookeeper.connect", "ignored",
     "ZooKeeper: librdkafka connects through bootstrap.servers", "kafka"),
    ("systems.<system>.bootstrap.servers", "supported", "", "kafka"),
    ("systems.<system>.producer.bootstrap.servers", "supported",
     "used when systems.<system>.bootstrap.servers is not set", "kafka"),
    ("systems.<system>.consumer.bootstrap.servers", "supported",
     "used when systems.<system>.bootstrap.servers is not set", "kafka"),
    ("systems.<system>.consumer.auto.offset.reset", "supported",
     "what a task does when its checkpointed input offset no longer exists (deleted by "
     "retention): earliest/smallest (default), latest/largest, error/none; warned, counted "
     "(see docs/operations/input-retention.md). A task without a checkpoint still starts at "
     "the oldest offset", "kafka"),
    ("systems.<system>.consumer.*", "mapped",
     "passed to librdkafka unchanged when librdkafka knows the key; a Java-client-only key "
     "(e.g. auto.commit.enable, key.deserializer) is left out with an INFO line", "kafka"),
    ("systems.<system>.producer.*", "mapped",
     "passed to librdkafka unchanged when librdkafka knows the key; a Java-client-only key "
     "(e.g. key.serializer, partitioner.class) is left out with an INFO line", "kafka"),
    ("systems.<system>.samza.key.serde", "supported", "", "kafka"),
    ("systems.<system>.samza.msg.serde", "supported", "", "kafka"),
    ("systems.<system>.streams.<topic>.samza.key.serde", "supported", "", "kafka"),
    ("systems.<system>.streams.<topic>.samza.msg.serde", "supported", "", "kafka"),
    ("systems.<system>.streams.<stream>.samza.offset.default", "ignored",
     "a task without a checkpoint starts at the oldest offset (Samza's `oldest`)", "kafka"),
    ("systems.<system>.streams.<stream>.samza.reset.offset", "ignored",
     "a task resumes from its checkpoint; move it with `millpond checkpoint set`", "kafka"),
    ("systems.<system>.streams.<stream>.samza.priority", "ignored",
     "inputs are read in the consumer's fetch order", "kafka"),
    ("systems.<system>.streams.<stream>.samza.bootstrap", "ignored",
     "inputs are read in the consumer's fetch order (side inputs are bootstrapped)", "kafka"),
    ("systems.<system>.samza.fetch.threshold", "ignored",
     "prefetch is librdkafka's queued.max.messages.kbytes (a consumer.* key)", "kafka"),
    ("systems.<system>.samza.fetch.threshold.bytes", "ignored",
     "prefetch is librdkafka's queued.max.messages.kbytes (a consumer.* key)", "kafka"),
    # --- other systems: HDFS, Event Hubs, Kinesis, Elasticsearch, Azure Blob Storage
    ("systems.<system>.producer.hdfs.*", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.stagingDirectory", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.consumer.bufferCapacity", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.consumer.numMaxRetries", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.partitioner.defaultPartitioner.*", "ignored", _OTHER_SYSTEM,
     "other systems"),
    ("systems.<system>.consumer.reader", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.stream.list", "ignored", _OTHER_SYSTEM, "other systems"),
    ("streams.<stream-id>.eventhubs.*", "ignored", _OTHER_SYSTEM, "other systems"),
    ("sensitive.*", "ignored", _OTHER_SYSTEM + " (credentials of other systems)",
     "other systems"),
    ("systems.<system>.eventhubs.*", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.streams.<stream>.aws.*", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.aws.*", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.client.*", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.index.request.factory", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.bulk.flush.*", "ignored", _OTHER_SYSTEM, "other systems"),
    ("systems.<system>.azureblob.*", "ignored", _OTHER_SYSTEM, "other systems"),
    # --- state storage
    ("stores.<store>.factory", "supported",
     "rocksdb, inmemory or Samza's storage engine factory classes", "stores"),
    ("stores.<store>.key.serde", "supported", "", "stores"),
    ("stores.<store>.msg.serde", "supported", "", "stores"),
    ("stores.<store>.changelog", "supported", "", "stores"),
    ("stores.<store>.changelog.max.message.size.bytes", "supported",
     "default 1048576, as Samza's StorageConfig", "stores"),
    ("stores.<store>.disallow.large.messages", "supported",
     "a larger value stops the job at its write-down, naming store, key and size", "stores"),
    ("stores.<store>.drop.large.messages", "supported",
     "a larger value is not written to the store nor the changelog; counted and logged",
     "stores"),
    ("stores.<store>.rocksdb.ttl.ms", "mapped", "RocksDB's TTL mode (1 s resolution)",
     "stores"),
    ("job.logged.store.base.dir", "supported", "default `state`", "stores"),
    ("job.non-logged.store.base.dir", "ignored",
     "stores without a changelog live under job.logged.store.base.dir too", "stores"),
    ("stores.default.changelog.min.compaction.lag.ms", "mapped",
     "min.compaction.lag.ms of every changelog millpond creates without its own setting "
     "(unset: the broker's default, not Samza's 4 h)", "stores"),
    ("stores.<store>.changelog.min.compaction.lag.ms", "mapped",
     "min.compaction.lag.ms of the changelog topic millpond creates", "stores"),
    ("stores.default.changelog.replication.factor", "mapped",
     "replication of every changelog millpond creates without its own setting", "stores"),
    ("stores.<store>.changelog.replication.factor", "supported", "default min(3, brokers)",
     "stores"),
    ("stores.<store>.changelog.kafka.*", "supported",
     "topic configs of a changelog millpond creates", "stores"),
    ("stores.<store>.write.batch.size", "supported",
     "0 = write-through, as in Samza; millpond's default is 50000", "stores"),
    ("stores.<store>.object.cache.size", "supported",
     "0 = no cache, as in Samza; millpond's default is 100000", "stores"),
    ("stores.<store>.container.cache.size.bytes", "mapped",
     "a block cache of the store's own, per task (not divided by the task count); unset, "
     "the store uses the process's shared cache", "stores"),
    ("stores.<store>.container.write.buffer.size.bytes", "mapped",
     "RocksDB memtable size, per store and task (not divided by the task count), counted "
     "by the process's shared write-buffer manager", "stores"),
    ("stores.<store>.rocksdb.compression", "mapped", "RocksDB compression (zlib is refused)",
     "stores"),
    ("stores.<store>.rocksdb.block.size.bytes", "mapped", "RocksDB block size", "stores"),
    ("stores.<store>.rocksdb.compaction.style", "mapped", "RocksDB compaction style",
     "stores"),
    ("stores.<store>.rocksdb.num.write.buffers", "mapped", "RocksDB max write buffers",
     "stores"),
    ("stores.<store>.rocksdb.max.log.file.size.bytes", "mapped", "RocksDB info LOG size",
     "stores"),
    ("stores.<store>.rocksdb.keep.log.file.num", "mapped", "RocksDB info LOG files kept",
     "stores"),
    ("stores.<store>.rocksdb.metrics.list", "ignored", _METRICS, "stores"),
    ("stores.<store>.rocksdb.delete.obsolete.files.period.micros", "mapped",
     "RocksDB delete_obsolete_files_period_micros", "stores"),
    ("stores-default.rocksdb.max.manifest.file.size.bytes", "ignored",
     "set stores.<store>.rocksdb.max.manifest.file.size per store", "stores"),
    ("stores.<store>.rocksdb.max.manifest.file.size", "mapped",
     "RocksDB max_manifest_file_size", "stores"),
    ("stores.<store>.side.inputs", "supported",
     "kafka.<topic>[,...] that fill the store instead of a changelog", "stores"),
    ("stores.<store>.side.inputs.processor.factory", "supported",
     "a Python class turning side-input messages into store entries", "stores"),
    # --- deployment
    ("yarn.package.path", "ignored", _YARN, "deployment"),
    ("job.container.count", "ignored", _CLUSTER, "deployment"),
    ("yarn.container.count", "ignored", _CLUSTER, "deployment"),
    ("cluster-manager.container.memory.mb", "mapped",
     "job.container.memory.mb: the process's memory budget", "deployment"),
    ("cluster-manager.*", "ignored", _CLUSTER, "deployment"),
    ("yarn.*", "ignored", _YARN, "deployment"),
    ("task.execute", "ignored", _YARN, "deployment"),
    ("task.java.home", "ignored", _JAVA, "deployment"),
    ("app.runner.class", "ignored", _COORD, "deployment"),
    ("job.coordinator.factory", "ignored", _COORD, "deployment"),
    ("job.coordinator.zk.*", "ignored", _COORD + " (no ZooKeeper)", "deployment"),
    ("azure.storage.connect", "ignored", _COORD, "deployment"),
    ("job.coordinator.azure.blob.length", "ignored", _COORD, "deployment"),
    ("job.debounce.time.ms", "ignored", _COORD, "deployment"),
    # --- metrics
    ("metrics.reporter.<reporter>.class", "ignored", _METRICS, "metrics"),
    ("metrics.reporters", "supported",
     "`prometheus` starts millpond's Prometheus reporter (metrics.reporter.prometheus.port, "
     ".host); Samza's Java reporters (named with a .class) are ignored", "metrics"),
    ("metrics.reporter.<reporter>.stream", "ignored", _METRICS, "metrics"),
    ("metrics.reporter.<reporter>.interval", "ignored", _METRICS, "metrics"),
]

SAMZA_KEYS: tuple[SamzaKey, ...] = tuple(SamzaKey(*row) for row in _ROWS)


def _specificity(entry: SamzaKey) -> tuple[int, int]:
    """More literal characters win; a pattern without a wildcard beats one with."""
    literal = len(re.sub(r"<[^>]+>|\*", "", entry.pattern))
    return (0 if "*" in entry.pattern else 1, literal)


_BY_SPECIFICITY = sorted(SAMZA_KEYS, key=_specificity, reverse=True)


@lru_cache(maxsize=4096)
def samza_key(key: str) -> SamzaKey | None:
    """The row of Samza's table that ``key`` belongs to (the most specific match), or None."""
    for entry in _BY_SPECIFICITY:
        if entry.regex.fullmatch(key):
            return entry
    return None


def samza_store_key(sub: str) -> SamzaKey | None:
    """The row for ``stores.<store>.<sub>`` (``sub`` relative to the store's prefix)."""
    return samza_key(f"stores.s.{sub}")


_CLIENT_KEY = re.compile(r"systems\.(?P<system>[^.]+)\.(?P<client>consumer|producer)\.(?P<key>.+)")


def ignored_reason(key: str, props: Mapping[str, str] | None = None) -> str | None:
    """Why millpond ignores ``key`` (None: it uses it, or the key is not Samza's).

    Covers the table's ignored rows and ``systems.<s>.consumer|producer.*`` keys librdkafka
    does not get (Java-client-only). ``app.class`` counts as ignored only next to a
    ``task.class`` (``props`` given), and never when it names a millpond app
    (``module:attribute``, whose compiled config has the task.class that runs it)."""
    entry = samza_key(key)
    if entry is not None and entry.fate == "ignored":
        if key == "app.class" and props is not None and (
                not props.get("task.class", "").strip() or ":" in props.get("app.class", "")):
            return None
        return entry.note
    match = _CLIENT_KEY.fullmatch(key)
    if match and match["key"] != "bootstrap.servers":
        client: Literal["consumer", "producer"] = (
            "consumer" if match["client"] == "consumer" else "producer")
        return client_key_reason(match["system"], client, match["key"])
    return None


def check_refused(props: Properties) -> None:
    """ConfigError (file:line) for a key whose meaning millpond cannot honour."""
    for key, value in props.items():
        entry = samza_key(key)
        if entry is None or entry.fate != "refused":
            continue
        if key.endswith(".samza.broadcast") and value.strip().lower() != "true":
            continue
        if not value.strip():
            continue
        raise error(props, key, f"not supported: {entry.note}")


def log_ignored(props: Properties) -> list[str]:
    """Log one INFO line per ignored key (name, where, why); return the keys."""
    keys = []
    for key in props:
        reason = ignored_reason(key, props)
        if reason is not None:
            log.info("ignoring %s (%s): %s", key, describe(props, key), reason)
            keys.append(key)
    return keys


def unresolved_ok(key: str, props: Mapping[str, str]) -> bool:
    """True if an unresolved ``${NAME}`` in ``key`` may stay: millpond ignores the key."""
    return ignored_reason(key, props) is not None


def markdown_table() -> str:
    """The table as Markdown, one table per section of Samza's docs (docs/samza-keys.md)."""
    out: list[str] = []
    for entry in SAMZA_KEYS:
        if not out or entry.section != _last_section(out):
            out += ([""] if out else []) + [f"### {entry.section}", "",
                                            "| Samza key | fate | what millpond does |",
                                            "|---|---|---|"]
        note = entry.note.replace("|", "\\|").replace("<", "&lt;")
        out.append(f"| `{entry.pattern}` | {entry.fate} | {note} |")
    return "\n".join(out)


def _last_section(lines: list[str]) -> str:
    return next(line[4:] for line in reversed(lines) if line.startswith("### "))


DOC_HEADER = """\
# Samza configuration keys in millpond

<!-- generated by `python -m millpond.config.samza_keys > docs/samza-keys.md`; edit
millpond/config/samza_keys.py, not this file -->

Every key of [Samza's configuration table](https://samza.apache.org/learn/documentation/latest/jobs/samza-configurations.html)
(and a few keys real Samza configs set that the table leaves out), with its fate in millpond:

- **supported**: the same meaning as in Samza;
- **mapped**: translated to librdkafka, RocksDB, a changelog topic config or another key;
- **ignored**: accepted, and logged once at INFO when the job loads, naming the key and why.
  A `${NAME}` placeholder in an ignored key is never resolved, so it never stops a job;
- **refused**: accepting it would silently change what the job computes, so the config is
  refused with the file and line.

`<store>`, `<system>`, `<serde>`, ... stand for one name; `<stream-id>`, `<stream>` and
`<topic>` may contain dots; `*` is any suffix. A key in neither this table nor millpond's own
keys ([configuration reference](reference/configuration.md)) is left alone when it is outside
millpond's namespaces: a task may read it through `context.config`; inside them (`job.`,
`task.`, `stores.`, `systems.`, `serializers.`, `metrics.`, `app.`) it warns at its line with
the closest known key.

"""


def main() -> None:
    """Print docs/samza-keys.md."""
    print(DOC_HEADER + markdown_table())


if __name__ == "__main__":
    main()

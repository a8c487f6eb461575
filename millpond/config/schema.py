"""Every configuration key millpond reads: name, default, type, one line of doc, section.

This table is the one place a key's default is written down. The parsers in
``millpond.config`` take their defaults from it (``int_default``, ``bool_default``,
``str_default``), so a changed default changes the parser and the documentation together;
the few keys read outside ``millpond.config`` (RocksDB tuning, the metrics reporter) are
checked against it by tests/unit/test_config_schema.py, which also fails when any parser
looks up a key this table lacks. ``docs/reference/configuration.md`` is generated from it::

    python -m millpond.config.schema > docs/reference/configuration.md

In names, ``<store>``, ``<system>``, ``<serde>``, ``<name>``, ``<prop>``, ... stand for one
name that may not contain a dot, except ``<topic>``, ``<stream-id>`` and ``<prop>``, which may
(as in ``millpond.config.samza_keys``). Samza keys that millpond ignores or refuses are not
here: ``docs/samza-keys.md`` lists the fate of every key of Samza's table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from millpond.config.patterns import key_regex

Kind = Literal["string", "int", "bool", "choice", "stream", "streams", "class", "serde",
               "path", "url", "passthrough"]

# The sections of the reference page, in order, with one line each.
SECTIONS: dict[str, str] = {
    "job": "The job's identity, its task class and inputs, timers and the processing guarantee.",
    "stores": "One block per store: `stores.<store>.*`. An unknown key under `stores.<store>.` "
              "warns with the closest known key.",
    "rocksdb": "RocksDB tuning per store, with Samza's names and defaults (Samza's "
               "RocksDbOptionsHelper), plus millpond's bloom filter.",
    "side-inputs": "A store filled from streams instead of a changelog (Samza's side inputs).",
    "systems": "The Kafka system: brokers, librdkafka settings and stream serdes.",
    "serdes": "Serdes by name: a built-in (`string`, `json`, `integer`, `long`, `double`, "
              "`bytes`, `uuid`, `avro`), one of Samza's factory classes or a Python class.",
    "backups": "Incremental snapshots of the stores in object storage (fsspec URLs).",
    "metrics": "Prometheus metrics, with Samza's reporter keys.",
    "samza": "Samza's spellings millpond also reads (a Samza config ports as it is).",
}

TITLES = {
    "job": "Job and tasks", "stores": "Stores", "rocksdb": "RocksDB", "side-inputs": "Side inputs",
    "systems": "Systems (Kafka)", "serdes": "Serdes", "backups": "Backups", "metrics": "Metrics",
    "samza": "Samza aliases",
}

MiB = 1024 * 1024


@dataclass(frozen=True)
class Key:
    """One key (or a pattern of keys) millpond reads.

    ``default`` is the value as a ``.properties`` line would write it; None means unset (no
    default, or ``required``). ``default_doc`` says what happens when a default is not one
    literal value (e.g. ``min(3, brokers)``).
    """

    name: str
    kind: Kind
    doc: str
    section: str
    default: str | None = None
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    default_doc: str | None = None

    @property
    def regex(self) -> re.Pattern[str]:
        return key_regex(self.name, _WIDE)

    def shown_default(self) -> str:
        """The default column of the reference page."""
        if self.required:
            return "required"
        if self.default_doc is not None:
            return self.default_doc
        return "unset" if self.default is None else f"`{self.default}`"


_WIDE = ("<topic>", "<stream-id>", "<prop>")




_S = "stores.<store>."
_R = "stores.<store>.rocksdb."
_SYS = "systems.<system>."
_SERDES = "`string`, `json`, `integer`, `long`, `double`, `bytes`, `uuid`, `avro`, a " \
          "`serializers.registry.<serde>.class` entry's name, or a dotted Python class"

KEYS: tuple[Key, ...] = (
    # -- job ---------------------------------------------------------------------------------
    Key("job.name", "string", "The job's name: its consumer group is `<job.name>-<job.id>`, "
        "its checkpoint topic `__millpond_checkpoint_<job.name>_<job.id>`.", "job",
        required=True),
    Key("job.id", "string", "Tells apart several deployments of one job.", "job", default="1"),
    Key("job.container.memory.mb", "int", "The process's memory budget (Samza's "
        "`cluster-manager.container.memory.mb` maps to it), divided between one RocksDB block "
        "cache and write-buffer manager shared by every store, the object caches, restore, "
        "producer and consumer buffers, and headroom for Python: see [Memory]"
        "(../operations/memory.md).", "job", default="1024", minimum=96),
    Key("task.class", "class", "The `millpond.StreamTask` subclass, `package.module.ClassName`, "
        "importable from the current directory.", "job", required=True),
    Key("task.inputs", "streams", "Input streams, `kafka.<topic>[,kafka.<topic>...]`; task N "
        "reads partition N of each (inputs need equal partition counts).", "job",
        required=True),
    Key("task.window.ms", "int", "How often `window()` runs; `-1` (or `0`) never.", "job",
        default="-1", minimum=-1),
    Key("task.commit.ms", "int", "How often each task commits its state, outputs and input "
        "offsets (also on `coordinator.commit()` and before a partition is revoked); 0 "
        "commits after every polled batch. Unset under `task.processing.guarantee="
        "exactly-once` it is 100 (Kafka Streams' default there): outputs read "
        "`read_committed` become visible at each commit.", "job",
        default="60000", minimum=0),
    Key("task.timeout.ms", "int", "How long a running job rides through Kafka being "
        "unreachable (a broker restart, an outage, a stalled broker) before it stops with one "
        "line: tasks that cannot commit are aborted and replayed from their last commit once "
        "Kafka answers (Kafka Streams' KIP-572 knob).", "job", default="300000", minimum=0),
    Key("task.processing.guarantee", "choice", "What a crash may repeat: see "
        "[Guarantees](../concepts/guarantees.md).", "job", default="effectively-once",
        choices=("at-least-once", "effectively-once", "exactly-once")),
    Key("task.drop.deserialization.errors", "bool", "Skip (and count) input messages that do "
        "not deserialize, instead of stopping the job.", "job", default="false"),
    Key("task.dlq.stream", "stream", "`kafka.<topic>`: send messages that fail to deserialize "
        "or process there (raw bytes plus `millpond.*` error headers); the store writes of "
        "a message whose process() failed are undone first.", "job"),
    Key("task.restore.listener.class", "class", "A Python class with `on_restore_start`, "
        "`on_batch_restored` and `on_restore_end(stats)`, called around each store's "
        "restore.", "job"),
    Key("task.bounded", "bool", "Stop when every input partition reaches its end, as "
        "`millpond run --bounded` does.", "job", default="false"),
    Key("job.partitioner", "choice", "How producers place keys on input partitions, for the "
        "tools that move state between partitions (Spark bootstrap and rescale), and for "
        "millpond's own keyed sends without a partition, and for live queries that find a key's "
        "partition (`job.query.address`): `murmur2` (Kafka's Java client "
        "default; librdkafka `murmur2_random`) or `consistent_random` (librdkafka's default, "
        "CRC-32). When unset, a `systems.kafka.producer.partitioner` naming one of these "
        "decides it; set both, they must agree.", "job", default="murmur2",
        choices=("murmur2", "consistent_random", "murmur2_random")),
    Key("job.config.strict", "bool", "An unknown key in millpond's own namespaces (`job.`, "
        "`task.`, `stores.<store>.`, `systems.<system>.` outside the librdkafka settings, "
        "`serializers.`, `metrics.`, `app.`) or a key set twice stops the job at load, "
        "naming its line; without it each warns (with the closest known key).", "job",
        default="false"),
    Key("job.logged.store.base.dir", "path", "Local stores live in "
        "`<dir>/<job>/<store>/partition-<N>`.", "job", default="state"),
    Key("job.state.permissions", "string", "Octal mode of every directory millpond writes "
        "under `<job.logged.store.base.dir>/<job>` and in a `file://` backup location; files "
        "get it without execute bits (`0640`), other users get nothing. The owner needs "
        "`7`; `0700` makes the state the owner's alone. See "
        "[Security](../operations/security.md#data-at-rest).", "job", default="0750"),
    Key("job.changelog.system", "string", "The system of changelog names written without one; "
        "when set, a store without `changelog` gets `<job.name>-<job.id>-<store>-changelog`.",
        "job", default="kafka"),
    Key("job.query.address", "string", "`host:port` of the process's query endpoint, which "
        "answers reads of the job's stores over HTTP while the job runs, those of the tasks it "
        "holds and, forwarded, any other process's (off when unset; port `0` picks a free "
        "port, logged). Other processes reach it at this address (a wildcard host at the "
        "process's address as the broker sees it). Listen on loopback unless the "
        "network is trusted, and set `job.query.token` beyond it. See [Queries]"
        "(../operations/queries.md).", "job"),
    Key("job.query.linger.ms", "int", "How long a query may wait for a busy run loop: while "
        "the job's polls fill whole batches, the loop turns to the query endpoint's "
        "connections at most once in this many ms and answers every request that came "
        "meanwhile, rather than a few between every two batches. Each turn costs the loop far "
        "more than one answer (its caches are cold after a batch), so at 1,000 gets/s "
        "`20` takes about half the throughput that `0` does, for ~10 ms more latency. An "
        "idle job serves the endpoint every iteration whatever this is; `0` does so always. "
        "See [Queries](../operations/queries.md#cost).", "job", default="20", minimum=0,
        maximum=1000),
    Key("job.query.token", "string", "A bearer token the query endpoint requires: every "
        "request (but the page at `/`, which carries no data) carries `Authorization: "
        "Bearer <token>` or is answered 401; processes send it to each other when they forward, and `millpond query` sends "
        "it. Every process of the job sets the same one. Keep it out of the file with "
        "`job.query.token=${MILLPOND_QUERY_TOKEN}` (read from the environment). Off when "
        "unset. See [Queries](../operations/queries.md#security).", "job"),
    # -- stores ------------------------------------------------------------------------------
    Key(_S + "factory", "choice", "The engine: `rocksdb`, `inmemory`, or Samza's factory "
        "class names (`...RocksDbKeyValueStorageEngineFactory`, "
        "`...KeyValueStorageEngineFactory`, `...InMemoryKeyValueStorageEngineFactory`).",
        "stores", required=True, choices=("rocksdb", "inmemory")),
    Key(_S + "key.serde", "serde", f"How keys are stored: {_SERDES}.", "stores",
        required=True),
    Key(_S + "msg.serde", "serde", "How values are stored (the same choices as `key.serde`).",
        "stores", required=True),
    Key(_S + "changelog", "stream", "`kafka.<topic>`: mirror every write to this compacted "
        "topic, from which the store is restored.", "stores"),
    Key(_S + "changelog.replication.factor", "int", "Replication of a changelog millpond "
        "creates.", "stores", minimum=1, default_doc="min(3, brokers)"),
    Key(_S + "changelog.kafka.<prop>", "passthrough", "Topic configs of a changelog millpond "
        "creates (e.g. `segment.bytes`); it is always compacted.", "stores"),
    Key(_S + "changelog.min.compaction.lag.ms", "int", "Samza's spelling of "
        "`changelog.kafka.min.compaction.lag.ms` (set one of the two).", "stores", minimum=0),
    Key(_S + "object.cache.size", "int", "Entries in the store's object cache, per task; `0` "
        "turns the cache off (every `get` deserializes, every `put` is written at once). "
        "Samza's default is 1000.", "stores", default="100000", minimum=0),
    Key(_S + "write.batch.size", "int", "Dirty entries that force a write-down before the "
        "commit; `0` is write-through. Repeated writes to a key between commits coalesce up "
        "to it. A dataflow's window stores default to 100000.", "stores", default="50000",
        minimum=0),
    Key(_S + "object.cache.max.bytes", "int", "Memory bound of the object cache per task "
        "(each entry charged `sys.getsizeof` of key and value plus ~150 B when it goes in, when "
        "a `put` follows a miss, and at one `put` in 32 over a value); the cache keeps whichever of this and `object.cache.size` is smaller; `0` "
        "turns it off. Unset: an equal share of the process's object caches' budget "
        "(15% of `job.container.memory.mb`).", "stores",
        default=str(32 * MiB), minimum=0, default_doc="a share of the budget"),
    Key(_S + "changelog.max.message.size.bytes", "int", "The largest serialized value "
        "`disallow.large.messages` / `drop.large.messages` let through (Samza's "
        "`LargeMessageSafeStore`).", "stores", default="1048576", minimum=1),
    Key(_S + "disallow.large.messages", "bool", "A larger value stops the job at its "
        "write-down, naming store, key and size.", "stores", default="false"),
    Key(_S + "drop.large.messages", "bool", "A larger value is skipped in RocksDB and the "
        "changelog, counted and logged.", "stores", default="false"),
    Key(_S + "changelog.bad.records", "choice", "What a restore does with a changelog record "
        "the store's key or msg serde cannot decode: `fail` stops with one line naming the "
        "store, topic, partition, offset and key; `skip` leaves it out of the store (the key "
        "keeps its earlier value), counted and logged.", "stores", default="fail",
        choices=("fail", "skip")),
    Key(_S + "backup.enabled", "bool", "With `job.state.backup.uri` set: `false` leaves this "
        "store out of the backups.", "stores", default="true"),
    # -- rocksdb -----------------------------------------------------------------------------
    Key(_R + "compression", "choice", "Block compression. `zlib` is refused: the RocksDB "
        "rocksdict ships stores zlib blocks uncompressed.", "rocksdb", default="snappy",
        choices=("none", "snappy", "lz4", "lz4hc", "zstd", "bzip2")),
    Key(_R + "block.size.bytes", "int", "SST block size.", "rocksdb", default="4096",
        minimum=1),
    Key(_R + "num.write.buffers", "int", "Memtables per store.", "rocksdb", default="3",
        minimum=1),
    Key(_R + "compaction.style", "choice", "RocksDB's compaction style.", "rocksdb",
        default="universal", choices=("universal", "level", "fifo")),
    Key(_R + "bloom.filter.bits.per.key", "int", "millpond's extension: a bloom filter for "
        "SSTs and the memtable (about twice the random `get`s under universal compaction); "
        "`0` turns it off.", "rocksdb", default="10", minimum=0),
    Key(_R + "ttl.ms", "int", "Entries older than this vanish at compaction (RocksDB's TTL "
        "mode, 1 s resolution); `0` keeps them.", "rocksdb", default="0"),
    Key(_R + "max.log.file.size.bytes", "int", "RocksDB's own info LOG rolls at this size; "
        "`0` never.", "rocksdb", default=str(64 * MiB), minimum=0),
    Key(_R + "keep.log.file.num", "int", "RocksDB info LOG files kept.", "rocksdb",
        default="2", minimum=1),
    Key(_R + "delete.obsolete.files.period.micros", "int", "How often RocksDB deletes "
        "obsolete files.", "rocksdb", minimum=0, default_doc="RocksDB's (6 h)"),
    Key(_R + "max.manifest.file.size", "int", "The MANIFEST file rolls at this size.",
        "rocksdb", minimum=0, default_doc="RocksDB's"),
    Key(_S + "container.write.buffer.size.bytes", "int", "Memtable size, per store and task "
        "(Samza divides its `container.*` values by the task count; millpond does not); the "
        "memtables stay counted by the process's shared write-buffer manager.",
        "rocksdb", default=str(32 * MiB), minimum=1,
        default_doc="from the budget (32 MiB at 1 GB)"),
    Key(_S + "container.cache.size.bytes", "int", "A block cache of the store's own, per "
        "task, outside the process's shared one.",
        "rocksdb", default=str(100 * MiB), minimum=1,
        default_doc="the shared cache (40% of the budget)"),
    # -- side inputs -------------------------------------------------------------------------
    Key(_S + "side.inputs", "streams", "Fill the store from these streams (like "
        "`task.inputs`); such a store has no changelog and tasks get it read-only.",
        "side-inputs"),
    Key(_S + "side.inputs.processor.factory", "class", "A Python class with "
        "`process(message, store)` returning `(key, value)` pairs, e.g. "
        "`millpond.sideinputs.KeyValueProcessor`.", "side-inputs"),
    Key(_S + "side.inputs.broadcast", "bool", "`true`: every task reads every partition of "
        "the side inputs (the store holds the whole topics in each task, as a Samza side input "
        "that is also a broadcast input), so their partition count need not match the job's "
        "tasks; `false`: task N reads partition N.", "side-inputs", default="false"),
    # -- systems -----------------------------------------------------------------------------
    Key(_SYS + "bootstrap.servers", "string", "The Kafka brokers, `host:port[,...]` (else the "
        "consumer's, then the producer's `bootstrap.servers`).", "systems", required=True),
    Key(_SYS + "consumer.auto.offset.reset", "choice", "What a task does when its "
        "checkpointed input offset no longer exists (deleted by retention or DeleteRecords "
        "before it was read): resume at the log start, at the end, or stop the job with one "
        "line; each skip is warned and counted. See [Input retention]"
        "(../operations/input-retention.md).", "systems", default="earliest",
        choices=("earliest", "smallest", "latest", "largest", "error", "none")),
    Key(_SYS + "consumer.<prop>", "passthrough", "librdkafka consumer settings, passed "
        "through; Java-client-only keys are left out with an INFO line. millpond's consumers "
        "default `fetch.queue.backoff.ms` to 20. A value librdkafka refuses (or two that "
        "disagree) stops the command with one line naming each setting's file and line.",
        "systems"),
    Key(_SYS + "producer.<prop>", "passthrough", "librdkafka producer settings, passed through "
        "(Java-client-only keys are left out with an INFO line).", "systems"),
    Key(_SYS + "samza.key.serde", "serde", "Default key serde of the system's streams.",
        "systems", default_doc="raw bytes"),
    Key(_SYS + "samza.msg.serde", "serde", "Default message serde of the system's streams.",
        "systems", default_doc="raw bytes"),
    Key(_SYS + "streams.<topic>.samza.key.serde", "serde", "Key serde of one stream.",
        "systems", default_doc="the system's"),
    Key(_SYS + "streams.<topic>.samza.msg.serde", "serde", "Message serde of one stream.",
        "systems", default_doc="the system's"),
    # -- serdes ------------------------------------------------------------------------------
    Key("serializers.registry.<serde>.class", "class", "Names a serde: one of Samza's serde "
        "factory classes (Samza's byte layouts), a built-in name or a dotted Python class.",
        "serdes"),
    Key("serializers.registry.<serde>.<param>", "passthrough", "Serde parameters, e.g. "
        "`encoding` for a string serde.", "serdes"),
    # -- backups -----------------------------------------------------------------------------
    Key("job.state.backup.uri", "url", "Turns backups on: an fsspec URL such as "
        "`s3://bucket/prefix` or `file:///mnt/shared/prefix`.", "backups"),
    Key("job.state.backup.interval.ms", "int", "At most one upload started per interval and "
        "store partition.", "backups", default="60000", minimum=0),
    Key("job.state.backup.retain", "int", "Snapshots kept per store partition.", "backups",
        default="3", minimum=1),
    Key("job.state.backup.options.<prop>", "passthrough", "Passed to the fsspec file system "
        "(s3fs); a dotted name nests (`options.client_kwargs.endpoint_url`), `true`/`false` "
        "become booleans and numbers ints or floats (not `key`, `secret`, `token`, "
        "`password`); merged key by key into the S3 defaults (`config_kwargs.connect_timeout=5`, "
        "`read_timeout=30`, `retries.max_attempts=2`).", "backups"),
    # -- metrics -----------------------------------------------------------------------------
    Key("metrics.reporters", "string", "`prometheus` serves metrics; a Samza reporter with a "
        "`metrics.reporter.<name>.class` is ignored.", "metrics"),
    Key("metrics.reporter.prometheus.port", "int", "Port of `/metrics`; `0` picks a free "
        "port (logged). Required when `metrics.reporters` lists `prometheus`.", "metrics",
        minimum=0, maximum=65535),
    Key("metrics.reporter.prometheus.host", "string", "Address to listen on (`0.0.0.0` to be "
        "scraped from another machine).", "metrics", default="127.0.0.1"),
    Key("metrics.reporter.<name>.class", "class", "A Samza (Java) reporter's class: that "
        "reporter is ignored, not run.", "metrics"),
    # -- samza aliases -----------------------------------------------------------------------
    Key("app.dropped.operators", "string", "Stateful operators removed from a dataflow app on "
        "purpose, comma-separated: without them listed, an app whose last commit holds state "
        "of operators it no longer has is refused at start (a renamed operator would lose its "
        "state).", "samza"),
    Key("app.name", "string", "`job.name` when `job.name` is unset.", "samza"),
    Key("app.id", "string", "`job.id` when `job.id` is unset.", "samza"),
    Key("cluster-manager.container.memory.mb", "int", "`job.container.memory.mb` when that "
        "is unset.", "samza", minimum=96),
    Key("app.class", "class", "`<module>:<attribute>` naming a `millpond.streams.App`: the "
        "job runs that dataflow (no `task.class` or `task.inputs` then). A Samza application "
        "class (no `:`) is ignored with `task.class`; without it the config is refused.",
        "samza"),
    Key("stores.default.changelog.replication.factor", "int", "Default of every store's "
        "`changelog.replication.factor`.", "samza", minimum=1),
    Key("stores.default.changelog.min.compaction.lag.ms", "int", "Default of every store's "
        "`changelog.min.compaction.lag.ms`.", "samza", minimum=0),
    Key(_SYS + "default.stream.samza.key.serde", "serde", "Samza's spelling of "
        "`systems.<system>.samza.key.serde`.", "samza"),
    Key(_SYS + "default.stream.samza.msg.serde", "serde", "Samza's spelling of "
        "`systems.<system>.samza.msg.serde`.", "samza"),
    Key("streams.<stream-id>.samza.key.serde", "serde", "Key serde of a Samza stream id "
        "(`systems.<system>.streams.<topic>.*` wins).", "samza"),
    Key("streams.<stream-id>.samza.msg.serde", "serde", "Message serde of a Samza stream id.",
        "samza"),
    Key("streams.<stream-id>.samza.system", "string", "The stream id's system.", "samza",
        default="kafka"),
    Key("streams.<stream-id>.samza.physical.name", "string", "The stream id's topic.", "samza",
        default_doc="the stream id"),
    # Last: every more specific systems.<system>.* pattern above matches first.
    Key(_SYS + "<prop>", "passthrough", "librdkafka settings for every client millpond makes "
        "(consumers, producers, the admin client, readers, the CLI's commands; Spark's Java "
        "client gets them translated), written once: `security.protocol`, `sasl.mechanism`, `sasl.username`, `ssl.ca.location`, "
        "... (any key both librdkafka clients know; `${NAME}` reads a secret from the "
        "environment). `consumer.<prop>` and `producer.<prop>` win for their client.",
        "systems"),
)

BY_NAME: dict[str, Key] = {key.name: key for key in KEYS}
assert len(BY_NAME) == len(KEYS), "a key is listed twice"
assert {key.section for key in KEYS} <= SECTIONS.keys()


def key(name: str) -> Key:
    """The schema entry named ``name`` (a key or pattern exactly as listed)."""
    return BY_NAME[name]


def lookup(name: str) -> Key | None:
    """The schema entry a concrete key such as ``stores.counts.factory`` matches, or None.
    An exact entry (``stores.default.changelog.replication.factor``) wins over a pattern."""
    if name in BY_NAME:
        return BY_NAME[name]
    return next((k for k in KEYS if k.regex.fullmatch(name)), None)


def str_default(name: str) -> str:
    found = key(name)
    assert found.default is not None, f"{name} has no default"
    return found.default


def int_default(name: str) -> int:
    return int(str_default(name))


def bool_default(name: str) -> bool:
    return {"true": True, "false": False}[str_default(name)]


def store_keys() -> tuple[str, ...]:
    """The keys under ``stores.<store>.`` (prefix removed) that name one setting (no pattern)."""
    return tuple(k.name[len(_S):] for k in KEYS
                 if k.name.startswith(_S) and "<" not in k.name[len(_S):])


# ---- the reference page -----------------------------------------------------------------------

DOC_HEADER = """\
# Configuration reference

<!-- generated by `python -m millpond.config.schema > docs/reference/configuration.md`; edit
millpond/config/schema.py, not this file -->

A job is one Java `.properties` file with Samza's key names. Every key millpond reads is
below, with its default; errors name the key, the file and the line. `--config-override
key=value` (repeatable) overrides any key, and `${NAME}` in a value is replaced from the
environment (an unset variable is an error at its line; `$${NAME}` stands for the text
`${NAME}`). millpond reads the file as UTF-8 (a leading byte-order mark is dropped), where
Samza reads it as ISO-8859-1: write characters outside ASCII as `\\uXXXX` escapes and both
read the same value. A key outside millpond's namespaces (`job.`, `task.`, `stores.`,
`systems.`, `serializers.`, `metrics.`, `app.`) is left alone, so a task can read its own keys
through `context.config`; a key inside them that neither this page nor Samza's table lists
warns at its line with the closest known key, and so does a key set twice
(`job.config.strict=true` makes both errors). What happens to each key of Samza's table is in
[Samza keys](../samza-keys.md).

`<store>`, `<system>`, `<serde>`, `<name>` stand for one name; `<topic>`, `<stream-id>` and
`<prop>` may contain dots.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _type(k: Key) -> str:
    if k.choices:
        return "One of " + ", ".join(f"`{c}`" for c in k.choices) + "."
    text = {"passthrough": "any", "streams": "streams", "url": "URL"}.get(k.kind, k.kind)
    if k.minimum is not None and k.maximum is not None:
        text += f" {k.minimum}..{k.maximum}"
    elif k.minimum is not None:
        text += f" >= {k.minimum}"
    elif k.maximum is not None:
        text += f" <= {k.maximum}"
    return f"*{text}*"


def markdown() -> str:
    """The reference page: one table per section."""
    out = [DOC_HEADER]
    for section, intro in SECTIONS.items():
        out += ["", f"## {TITLES[section]}", "", intro, "",
                "| key | default | what it does |", "|---|---|---|"]
        for k in KEYS:
            if k.section == section:
                out.append(f"| `{k.name}` | {_cell(k.shown_default())} | "
                           f"{_cell(k.doc)} {_cell(_type(k))} |")
    return "\n".join(out) + "\n"


def main() -> None:
    """Print docs/reference/configuration.md."""
    print(markdown(), end="")


if __name__ == "__main__":
    main()

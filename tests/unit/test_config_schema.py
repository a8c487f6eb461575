"""The config schema (millpond.config.schema) covers every key millpond reads, its defaults are
the parsers' defaults, and the reference page is generated from it."""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import millpond
from millpond.config import (
    Config,
    ConfigError,
    ConfigWarning,
    Properties,
    parse_properties,
    schema,
)
from millpond.config.job import JobConfig
from millpond.config.stores import KNOWN_KEYS, StoreConfig
from millpond.metrics.config import DEFAULT_HOST, parse_reporters
from millpond.metrics.errors import MetricsConfigError
from millpond.stores.engines.rocksdb_options import (
    COMPACTION_STYLES,
    COMPRESSIONS,
    RocksDbOptions,
)
from millpond.stores.errors import StoreConfigError
from millpond.tasks.input_reset import ResetPolicy

REPO = Path(__file__).parents[2]
PAGE = REPO / "docs" / "reference" / "configuration.md"

# A config that sets every key of the schema, each at a valid value other than its default
# (concrete names for the patterns: store counts, side-input store profiles, system kafka).
EVERY_KEY = """\
job.name=every-key
job.id=2
task.class=examples.page_view_counter.PageViewCounter
task.inputs=kafka.page-views
task.window.ms=1000
task.commit.ms=5000
task.timeout.ms=120000
task.processing.guarantee=exactly-once
task.drop.deserialization.errors=true
task.dlq.stream=kafka.dead-letters
task.restore.listener.class=examples.listener.Listener
task.bounded=true
job.container.memory.mb=512
job.partitioner=consistent_random
job.query.address=127.0.0.1:0
job.query.token=s3cret
job.query.linger.ms=20
job.config.strict=true
job.logged.store.base.dir=/tmp/millpond-state
job.state.permissions=0700
job.changelog.system=kafka
stores.counts.factory=rocksdb
stores.counts.key.serde=text
stores.counts.msg.serde=json
stores.counts.changelog=kafka.counts-changelog
stores.counts.changelog.replication.factor=1
stores.counts.changelog.kafka.segment.bytes=1048576
stores.counts.changelog.min.compaction.lag.ms=1000
stores.counts.object.cache.size=10
stores.counts.write.batch.size=5
stores.counts.object.cache.max.bytes=1048576
stores.counts.changelog.max.message.size.bytes=2048
stores.counts.disallow.large.messages=true
stores.counts.drop.large.messages=true
stores.counts.backup.enabled=false
stores.counts.changelog.bad.records=skip
stores.counts.rocksdb.compression=zstd
stores.counts.rocksdb.block.size.bytes=16384
stores.counts.rocksdb.num.write.buffers=5
stores.counts.rocksdb.compaction.style=level
stores.counts.rocksdb.bloom.filter.bits.per.key=7
stores.counts.rocksdb.ttl.ms=1500
stores.counts.rocksdb.max.log.file.size.bytes=1048576
stores.counts.rocksdb.keep.log.file.num=5
stores.counts.rocksdb.delete.obsolete.files.period.micros=60000000
stores.counts.rocksdb.max.manifest.file.size=4194304
stores.counts.container.write.buffer.size.bytes=2097152
stores.counts.container.cache.size.bytes=3145728
stores.profiles.factory=inmemory
stores.profiles.key.serde=string
stores.profiles.msg.serde=json
stores.profiles.side.inputs=kafka.user-profiles
stores.profiles.side.inputs.processor.factory=millpond.sideinputs.KeyValueProcessor
stores.profiles.side.inputs.broadcast=true
systems.kafka.bootstrap.servers=127.0.0.1:9092
systems.kafka.consumer.fetch.min.bytes=1
systems.kafka.consumer.auto.offset.reset=largest
systems.kafka.producer.linger.ms=5
systems.kafka.samza.key.serde=string
systems.kafka.samza.msg.serde=json
systems.kafka.streams.page-views.samza.key.serde=string
systems.kafka.streams.page-views.samza.msg.serde=json
serializers.registry.text.class=org.apache.samza.serializers.StringSerdeFactory
serializers.registry.text.encoding=UTF-8
job.state.backup.uri=file:///tmp/millpond-backups
job.state.backup.interval.ms=1000
job.state.backup.retain=2
job.state.backup.options.auto_mkdir=true
metrics.reporters=prometheus,snapshot
metrics.reporter.prometheus.port=0
metrics.reporter.prometheus.host=0.0.0.0
metrics.reporter.snapshot.class=org.apache.samza.metrics.reporter.MetricsSnapshotReporterFactory
app.name=ignored-name
app.id=ignored-id
cluster-manager.container.memory.mb=768
app.class=org.example.IgnoredApp
app.dropped.operators=old-counts
stores.default.changelog.replication.factor=1
stores.default.changelog.min.compaction.lag.ms=10
systems.kafka.default.stream.samza.key.serde=string
systems.kafka.security.protocol=PLAINTEXT
systems.kafka.default.stream.samza.msg.serde=json
streams.clicks.samza.key.serde=string
streams.clicks.samza.msg.serde=json
streams.clicks.samza.system=kafka
streams.clicks.samza.physical.name=ad-clicks
"""


def every_key() -> Properties:
    return parse_properties(EVERY_KEY, "every-key.properties")


class RecordingDict(dict[str, str]):
    """A store's own properties (prefix removed) that record each key looked up."""

    def __init__(self, data: dict[str, str], prefix: str, seen: set[str]) -> None:
        super().__init__(data)
        self.prefix, self.seen = prefix, seen

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.seen.add(self.prefix + key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.seen.add(self.prefix + key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.seen.add(self.prefix + str(key))
        return super().__contains__(key)


def parse_everything(props: Properties, seen: set[str]) -> Config:
    """Every parser of job configuration, over ``props``."""
    config = Config.from_properties(props)
    for store in config.stores.values():
        for key in ("key.serde", "msg.serde"):
            config.serde_spec(getattr(store, key.replace(".", "_")), f"stores.{store.name}.{key}")
        RocksDbOptions.from_store_properties(
            RecordingDict(store.properties, f"stores.{store.name}.", seen))
    for ref in config.job.inputs:
        config.stream_serdes(ref)
    parse_reporters(props)
    ResetPolicy.of(config)
    return config


def test_every_key_is_in_the_schema_and_every_schema_key_is_set() -> None:
    props = every_key()
    unknown = [k for k in props if schema.lookup(k) is None]
    assert not unknown, f"EVERY_KEY sets keys the schema lacks: {unknown}"
    covered = {schema.lookup(k) for k in props}
    assert not [k.name for k in schema.KEYS if k not in covered], "add them to EVERY_KEY"


def test_parsers_read_no_key_the_schema_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse a config that sets everything and record every key looked up through
    Properties (``get``, ``in`` and ``[]`` all go through ``__getitem__``)."""
    seen: set[str] = set()
    original = Properties.__getitem__

    def recording(self: Properties, key: str) -> str:
        seen.add(self.prefix + key)  # a store's own keys keep the prefix they were read under
        return original(self, key)

    monkeypatch.setattr(Properties, "__getitem__", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # nothing in EVERY_KEY is unknown
        parse_everything(every_key(), seen)
    # A minimal config too: the parsers probe for keys that are unset.
    parse_everything(parse_properties(
        "job.name=j\ntask.class=a.B\ntask.inputs=kafka.t\n"
        "systems.kafka.bootstrap.servers=h:9092\n"
        "stores.s.factory=rocksdb\nstores.s.key.serde=string\nstores.s.msg.serde=json\n"), seen)
    missing = sorted(k for k in seen if schema.lookup(k) is None)
    assert not missing, f"parsers read keys millpond.config.schema does not list: {missing}"
    assert len(seen) > 60, sorted(seen)


_KEYLIKE = re.compile(r"(job|task|stores|systems|metrics|serializers|streams|app)"
                      r"\.[A-Za-z0-9_<>-]+(\.[A-Za-z0-9_<>-]+)*")
# Strings in millpond's code that look like keys but are none.
NOT_KEYS = {"job.properties"}
# Files whose key-like strings are Samza's table, not keys millpond reads.
NOT_READERS = {"config/samza_keys.py", "config/schema.py"}


def _key_strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string constant and f-string (each ``{...}`` part read as ``<x>``)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "<x>" for v in node.values)
            inside.update(id(v) for v in node.values)
            yield node.lineno, str(text)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in inside:
            yield node.lineno, node.value


def test_every_key_named_in_the_code_is_in_the_schema() -> None:
    """A static look at all of millpond (wherever its modules live): every string in the
    code that is a configuration key matches a schema entry, and so does every f-string
    (each ``{...}`` read as any text)."""
    root = Path(millpond.__file__).parent
    unknown = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in NOT_READERS:
            continue
        for line, text in _key_strings(ast.parse(path.read_text())):
            if not _KEYLIKE.fullmatch(text) or text in NOT_KEYS:
                continue
            # an f-string's {...} may stand for a name or for the rest of any schema key
            wild = re.compile(".+".join(map(re.escape, text.split("<x>"))))
            if schema.lookup(text) is None and not any(wild.fullmatch(k.name)
                                                        for k in schema.KEYS):
                unknown.append(f"millpond/{rel}:{line}: {text}")
    assert not unknown, "keys missing from millpond.config.schema:\n" + "\n".join(unknown)


def test_defaults_are_the_parsers_defaults() -> None:
    """Defaults read inside millpond.config come from the schema; the ones read elsewhere
    (RocksDB tuning, the metrics reporter, the store layers) must equal it."""
    props = parse_properties("job.name=j\nstores.s.factory=rocksdb\nstores.s.key.serde=string\n"
                             "stores.s.msg.serde=json\n")
    config = Config.from_properties(props)
    job, store = config.job, config.stores["s"]
    assert job == JobConfig(name="j") and job.partitioner == schema.str_default("job.partitioner")
    assert job.id == schema.str_default("job.id")
    assert job.window_ms == schema.int_default("task.window.ms")
    assert job.commit_ms == schema.int_default("task.commit.ms")
    assert job.processing_guarantee == schema.str_default("task.processing.guarantee")
    assert str(job.logged_store_base_dir) == schema.str_default("job.logged.store.base.dir")
    assert job.state_permissions == int(schema.str_default("job.state.permissions"), 8)
    s = "stores.<store>."
    assert store == StoreConfig("s", "rocksdb", "string", "json", properties=store.properties)
    assert store.object_cache_size == schema.int_default(s + "object.cache.size")
    assert store.write_batch_size == schema.int_default(s + "write.batch.size")
    assert store.object_cache_max_bytes == schema.int_default(s + "object.cache.max.bytes")
    assert store.max_message_size == schema.int_default(s + "changelog.max.message.size.bytes")
    assert store.backup_enabled is schema.bool_default(s + "backup.enabled")
    assert set(KNOWN_KEYS) == set(schema.store_keys())

    rocks = RocksDbOptions()
    r = s + "rocksdb."
    assert rocks.compression == schema.str_default(r + "compression")
    assert rocks.block_size_bytes == schema.int_default(r + "block.size.bytes")
    assert rocks.num_write_buffers == schema.int_default(r + "num.write.buffers")
    assert rocks.compaction_style == schema.str_default(r + "compaction.style")
    assert rocks.bloom_bits_per_key == schema.int_default(r + "bloom.filter.bits.per.key")
    assert rocks.ttl_ms is None and schema.int_default(r + "ttl.ms") == 0
    assert rocks.max_log_file_size_bytes == schema.int_default(r + "max.log.file.size.bytes")
    assert rocks.keep_log_file_num == schema.int_default(r + "keep.log.file.num")
    assert rocks.write_buffer_size_bytes == schema.int_default(
        s + "container.write.buffer.size.bytes")
    assert rocks.block_cache_size_bytes == schema.int_default(s + "container.cache.size.bytes")
    assert tuple(COMPRESSIONS) == schema.key(r + "compression").choices
    assert tuple(COMPACTION_STYLES) == schema.key(r + "compaction.style").choices
    assert DEFAULT_HOST == schema.str_default("metrics.reporter.prometheus.host")

    from millpond.partitioner import ALIASES, DEFAULT_PARTITIONER, PARTITIONERS
    from millpond.tasks import input_reset
    reset = "systems.<system>.consumer.auto.offset.reset"
    assert ResetPolicy.of(config).policy == input_reset.DEFAULT == schema.str_default(reset)
    assert tuple(input_reset.SPELLINGS) == schema.key(reset).choices
    from millpond.stores import cached, largemessage
    assert DEFAULT_PARTITIONER == schema.str_default("job.partitioner")
    assert (*PARTITIONERS, *ALIASES) == schema.key("job.partitioner").choices
    assert cached.DEFAULT_OBJECT_CACHE_SIZE == schema.int_default(s + "object.cache.size")
    assert cached.DEFAULT_WRITE_BATCH_SIZE == schema.int_default(s + "write.batch.size")
    assert largemessage.DEFAULT_MAX_MESSAGE_SIZE == schema.int_default(
        s + "changelog.max.message.size.bytes")


def _with(key: str, value: str) -> Properties:
    text = "\n".join(line for line in EVERY_KEY.splitlines() if not line.startswith(key + "="))
    return parse_properties(f"{text}\n{key}={value}\n", "every-key.properties")


@pytest.mark.parametrize("entry", [k for k in schema.KEYS if k.minimum is not None],
                         ids=lambda k: k.name)
def test_minimums_are_enforced(entry: schema.Key) -> None:
    """A value one below a key's documented minimum is refused (naming the key)."""
    concrete = next(k for k in every_key() if schema.lookup(k) is entry)
    props = _with(concrete, str(entry.minimum - 1 if entry.minimum is not None else 0))
    with pytest.raises((ConfigError, MetricsConfigError, StoreConfigError)) as info:
        parse_everything(props, set())
    assert concrete.rsplit(".", 2)[-1] in str(info.value)


@pytest.mark.parametrize("entry", [k for k in schema.KEYS if k.choices], ids=lambda k: k.name)
def test_choices_are_enforced(entry: schema.Key) -> None:
    """Every documented choice is accepted; anything else is refused."""
    concrete = next(k for k in every_key() if schema.lookup(k) is entry)
    for choice in entry.choices:
        parse_everything(_with(concrete, choice), set())
    with pytest.raises((ConfigError, StoreConfigError)):
        parse_everything(_with(concrete, "no-such-choice"), set())


def test_reference_page_is_generated_from_the_schema() -> None:
    assert PAGE.read_text() == schema.markdown(), (
        "regenerate: python -m millpond.config.schema > docs/reference/configuration.md")

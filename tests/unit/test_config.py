"""Config loading: overrides, ${ENV}, typed views with Samza defaults, store and serde checks."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from millpond.config import (
    Config,
    ConfigError,
    ConfigWarning,
    JobConfig,
    SerdeSpec,
    StoreConfig,
    StreamConfig,
    StreamRef,
)

# Samza's own store example, copied from its state-management documentation into tests/.
SAMZA_DOC_SNIPPET = Path(__file__).resolve().parent / "data" / "samza-doc-store-snippet.properties"
STORE = "stores.s.factory=rocksdb\nstores.s.key.serde=string\nstores.s.msg.serde=json\n"


def write(tmp_path: Path, text: str, name: str = "job.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, text: str, *overrides: str, env: dict[str, str] | None = None) -> Config:
    return Config.load(write(tmp_path, text), overrides, env={} if env is None else env)


def error_of(tmp_path: Path, text: str, *overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, *overrides)
    return info.value


# --- job --------------------------------------------------------------------------------------


def test_job_defaults_follow_samza(tmp_path: Path) -> None:
    job = load(tmp_path, "job.name=wordcount\n").job
    assert job == JobConfig(name="wordcount")
    assert job.id == "1" and job.task_class is None and job.inputs == []
    assert job.window_ms == -1 and job.commit_ms == 60000
    assert job.processing_guarantee == "effectively-once"
    assert job.logged_store_base_dir == Path("state") and job.changelog_system == "kafka"
    assert job.drop_deserialization_errors is False and job.dlq_stream is None


def test_job_settings(tmp_path: Path) -> None:
    job = load(tmp_path, """
job.name = counts
job.id = 7
task.class = app.tasks.Counter
task.inputs = kafka.page-views, clicks ,other.events,
task.window.ms = 5000
task.commit.ms = 1000
task.processing.guarantee = at-least-once
job.logged.store.base.dir = /var/lib/state
job.changelog.system = logs
task.drop.deserialization.errors = TRUE
task.dlq.stream = kafka.dead-letters
""").job
    assert job.id == "7" and job.task_class == "app.tasks.Counter"
    assert job.inputs == [StreamRef("kafka", "page-views"), StreamRef("kafka", "clicks"),
                          StreamRef("other", "events")]
    assert (job.window_ms, job.commit_ms) == (5000, 1000)
    assert job.processing_guarantee == "at-least-once"
    assert job.logged_store_base_dir == Path("/var/lib/state")
    assert job.changelog_system == "logs" and job.drop_deserialization_errors is True
    assert job.dlq_stream == StreamRef("kafka", "dead-letters")


def test_job_name_is_required(tmp_path: Path) -> None:
    err = error_of(tmp_path, "task.class=x\n")
    assert err.key == "job.name" and "required" in str(err)
    assert err.file == str(tmp_path / "job.properties")


def test_bad_integer_names_key_file_line_and_value(tmp_path: Path) -> None:
    err = error_of(tmp_path, "job.name=x\n\ntask.commit.ms = 10s\n")
    assert (err.key, err.line) == ("task.commit.ms", 3)
    assert str(err) == f"{tmp_path / 'job.properties'}:3: task.commit.ms: " \
        "expected an integer, got '10s'"


def test_bad_boolean(tmp_path: Path) -> None:
    err = error_of(tmp_path, "job.name=x\ntask.drop.deserialization.errors=yes\n")
    assert (err.key, err.line) == ("task.drop.deserialization.errors", 2)
    assert "expected true or false, got 'yes'" in str(err)


def test_unknown_processing_guarantee_lists_valid_ones(tmp_path: Path) -> None:
    err = error_of(tmp_path, "job.name=x\ntask.processing.guarantee=once\n")
    assert err.line == 2 and "'once'" in str(err)
    for valid in ("at-least-once", "effectively-once", "exactly-once"):
        assert valid in str(err)


@pytest.mark.parametrize("bad", ["kafka.", ".topic"])
def test_bad_stream_name(tmp_path: Path, bad: str) -> None:
    err = error_of(tmp_path, f"job.name=x\ntask.inputs=ok,{bad}\n")
    assert (err.key, err.line) == ("task.inputs", 2)


def test_stream_ref_parse_and_str() -> None:
    assert StreamRef.parse("kafka.a.b", "x") == StreamRef("kafka", "a.b")
    assert StreamRef.parse(" bare ", "logs") == StreamRef("logs", "bare")
    assert str(StreamRef("kafka", "t")) == "kafka.t"


# --- overrides, env, raw access ---------------------------------------------------------------


def test_overrides_win_and_are_located(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=x\ntask.commit.ms=1000\n",
                  "task.commit.ms=2000", "new.key = spaced value", "empty=")
    assert config.job.commit_ms == 2000
    assert config.location("task.commit.ms") == "override"
    assert config.location("job.name") == f"{tmp_path / 'job.properties'}:1"
    assert config.location("not.set") == str(tmp_path / "job.properties")  # not set: the file
    assert config.get("new.key") == " spaced value" and config.get("empty") == ""
    assert config.get("not.set", "d") == "d" and config.get("not.set") is None


def test_bad_override_errors_are_marked_as_overrides(tmp_path: Path) -> None:
    err = error_of(tmp_path, "job.name=x\ntask.commit.ms=1\n", "task.commit.ms=soon")
    assert (err.file, err.line) == ("override", None)
    assert str(err) == "override: task.commit.ms: expected an integer, got 'soon'"


@pytest.mark.parametrize("bad", ["no-equals", "=value", "  =v"])
def test_malformed_override(tmp_path: Path, bad: str) -> None:
    err = error_of(tmp_path, "job.name=x\n", bad)
    assert "bad --config-override" in str(err) and "key=value" in str(err)


def test_env_substitution(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "job.name=${APP}-${ENV}\nsystems.kafka.bootstrap.servers=${BROKER}:9092\n"
        "plain=$HOME and $ {X}\n",
        "task.class=${TASK}",
        env={"APP": "shop", "ENV": "prod", "BROKER": "k1", "TASK": "t.T"},
    )
    assert config.job.name == "shop-prod" and config.job.task_class == "t.T"
    assert config.systems["kafka"].bootstrap_servers == "k1:9092"
    assert config.get("plain") == "$HOME and $ {X}"
    assert config.location("job.name").endswith(":1")


def test_unset_env_variable_names_key_file_line_and_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "job.name=x\nsystems.kafka.bootstrap.servers=${KAFKA_BROKERS}\n",
             env={"OTHER": "1"})
    err = info.value
    assert (err.key, err.file, err.line) == (
        "systems.kafka.bootstrap.servers", str(tmp_path / "job.properties"), 2)
    assert "KAFKA_BROKERS" in str(err) and str(err).startswith(f"{err.file}:2: ")


def test_env_defaults_to_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MILLPOND_TEST_NAME", "from-env")
    assert Config.load(write(tmp_path, "job.name=${MILLPOND_TEST_NAME}")).job.name == "from-env"


# --- stores -----------------------------------------------------------------------------------


def test_store_defaults(tmp_path: Path) -> None:
    store = load(tmp_path, "job.name=x\n" + STORE).stores["s"]
    assert store == StoreConfig(
        name="s", factory="rocksdb", key_serde="string", msg_serde="json",
        properties={"factory": "rocksdb", "key.serde": "string", "msg.serde": "json"},
    )
    assert store.changelog is None and store.changelog_replication_factor is None
    assert (store.object_cache_size, store.write_batch_size, store.object_cache_max_bytes) == (
        100_000, 50_000, 32 * 1024 * 1024)
    # The config's defaults and the store layer's are the same numbers.
    from millpond.stores import cached

    assert (store.object_cache_size, store.write_batch_size, store.object_cache_max_bytes) == (
        cached.DEFAULT_OBJECT_CACHE_SIZE, cached.DEFAULT_WRITE_BATCH_SIZE,
        cached.DEFAULT_CACHE_MAX_BYTES)


def test_store_cache_keys_accept_zero_as_off(tmp_path: Path) -> None:
    store = load(tmp_path, "job.name=x\n" + STORE + """
stores.s.object.cache.size = 0
stores.s.write.batch.size = 0
stores.s.object.cache.max.bytes = 0
""").stores["s"]
    assert (store.object_cache_size, store.write_batch_size, store.object_cache_max_bytes) == (
        0, 0, 0)


def test_store_settings(tmp_path: Path) -> None:
    store = load(tmp_path, "job.name=x\n" + STORE + """
stores.s.changelog = my-changelog
stores.s.changelog.replication.factor = 3
stores.s.changelog.kafka.cleanup.policy = compact,delete
stores.s.changelog.kafka.retention.ms = 86400000
stores.s.object.cache.size = 0
stores.s.write.batch.size = 64
stores.s.object.cache.max.bytes = 1048576
stores.s.rocksdb.compression = lz4
stores.s.container.write.buffer.size.bytes = 1048576
stores.s.rocksdb.ttl.ms = 3600000
""").stores["s"]
    assert store.changelog == StreamRef("kafka", "my-changelog")
    assert store.changelog_replication_factor == 3
    assert store.changelog_topic_config == {
        "cleanup.policy": "compact,delete", "retention.ms": "86400000"}
    assert (store.object_cache_size, store.write_batch_size) == (0, 64)
    assert store.object_cache_max_bytes == 1048576
    assert store.properties["rocksdb.compression"] == "lz4"
    assert store.properties["container.write.buffer.size.bytes"] == "1048576"
    assert store.properties["rocksdb.ttl.ms"] == "3600000"


def test_bare_changelog_uses_job_changelog_system(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=x\njob.changelog.system=logs\n" + STORE +
                  "stores.s.changelog=bare\nstores.t.factory=inmemory\n"
                  "stores.t.key.serde=bytes\nstores.t.msg.serde=bytes\n"
                  "stores.t.changelog=kafka.explicit\n")
    assert config.stores["s"].changelog == StreamRef("logs", "bare")
    assert config.stores["t"].changelog == StreamRef("kafka", "explicit")
    assert config.stores["t"].factory == "inmemory"


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("rocksdb", "rocksdb"),
        ("inmemory", "inmemory"),
        ("org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory", "rocksdb"),
        ("org.apache.samza.storage.kv.KeyValueStorageEngineFactory", "rocksdb"),
        ("org.apache.samza.storage.kv.inmemory.InMemoryKeyValueStorageEngineFactory",
         "inmemory"),
    ],
)
def test_store_factory_aliases(tmp_path: Path, factory: str, expected: str) -> None:
    text = f"job.name=x\n{STORE}stores.s.factory={factory}\n"
    assert load(tmp_path, text).stores["s"].factory == expected


def test_unknown_store_factory(tmp_path: Path) -> None:
    err = error_of(tmp_path, "job.name=x\n" + STORE + "stores.s.factory=leveldb\n")
    assert (err.key, err.line) == ("stores.s.factory", 5)
    assert "'leveldb'" in str(err) and "rocksdb" in str(err)


@pytest.mark.parametrize("missing", ["key.serde", "msg.serde"])
def test_store_serdes_are_required(tmp_path: Path, missing: str) -> None:
    lines = ["job.name=x", "# my store", "stores.s.factory=rocksdb",
             "stores.s.key.serde=string", "stores.s.msg.serde=string"]
    text = "\n".join(line for line in lines if missing not in line)
    err = error_of(tmp_path, text)
    assert err.key == f"stores.s.{missing}" and err.line == 3  # the factory key's line
    assert str(err).startswith(f"{tmp_path / 'job.properties'}:3: stores.s.{missing}: is missing")


def test_store_without_factory_points_at_its_first_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, "job.name=x\nstores.s.key.serde=string\nstores.s.msg.serde=json\n")
    assert (err.key, err.line) == ("stores.s.factory", 2)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("object.cache.size=lots", "expected an integer, got 'lots'"),
        ("object.cache.size=-1", "at least 0"),
        ("write.batch.size=-1", "at least 0"),
        ("object.cache.max.bytes=-5", "at least 0"),
        ("changelog.replication.factor=0", "at least 1"),
        ("changelog.replication.factor=three", "got 'three'"),
    ],
)
def test_store_integer_errors(tmp_path: Path, setting: str, message: str) -> None:
    err = error_of(tmp_path, "job.name=x\n" + STORE + f"stores.s.{setting}\n")
    assert err.key == "stores.s." + setting.split("=")[0] and err.line == 5
    assert message in str(err)


def test_unknown_store_key_warns_with_closest_key(tmp_path: Path) -> None:
    text = "job.name=x\n" + STORE + "stores.s.object.cache.sise=10\nstores.s.zzz=1\n"
    with pytest.warns(ConfigWarning) as record:
        config = load(tmp_path, text)
    messages = [str(w.message) for w in record]
    assert messages[0] == (f"{tmp_path / 'job.properties'}:5: unknown store key "
                           "'stores.s.object.cache.sise'; did you mean 'stores.s.object.cache.size'?")
    assert messages[1].endswith(":6: unknown store key 'stores.s.zzz'")
    assert config.stores["s"].properties["object.cache.sise"] == "10"


def test_known_store_keys_do_not_warn(tmp_path: Path) -> None:
    text = "job.name=x\n" + STORE + "".join(
        f"stores.s.{k}=1\n" for k in (
            "rocksdb.block.size.bytes", "rocksdb.num.write.buffers", "rocksdb.ttl.ms",
            "rocksdb.max.log.file.size.bytes", "rocksdb.keep.log.file.num",
            "container.cache.size.bytes", "changelog.kafka.segment.ms"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(tmp_path, text)


# --- serdes -----------------------------------------------------------------------------------


def test_serde_spec_from_registry(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=x\n" + STORE.replace("json", "user") +
                  "serializers.registry.user.class=fastavro\n"
                  "serializers.registry.user.schema=schemas/user.avsc\n")
    spec = config.serde_spec("user", "stores.s.msg.serde")
    path = tmp_path / "job.properties"
    assert spec == SerdeSpec("user", "fastavro", {"schema": "schemas/user.avsc"}, f"{path}:4")


def test_serde_spec_builtin_short_name(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=x\n" + STORE)
    assert config.serde_spec("json", "stores.s.msg.serde") == SerdeSpec(
        "json", "json", {}, f"{tmp_path / 'job.properties'}:4")
    assert config.serde_spec("long").location == str(tmp_path / "job.properties")


def test_builtin_serde_with_registry_params(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=x\nserializers.registry.avro.schema={\"type\": \"long\"}\n")
    spec = config.serde_spec("avro")
    assert (spec.factory, spec.params) == ("avro", {"schema": '{"type": "long"}'})


def test_unknown_serde_name_is_located_at_the_referencing_key(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=x\n" + STORE.replace("json", "jsn"))
    with pytest.raises(ConfigError) as info:
        config.serde_spec(config.stores["s"].msg_serde, "stores.s.msg.serde")
    err = info.value
    assert (err.key, err.line) == ("stores.s.msg.serde", 4)
    assert "'jsn'" in str(err) and "serializers.registry.jsn.class" in str(err)


# --- systems ----------------------------------------------------------------------------------


def test_systems_and_stream_serdes(tmp_path: Path) -> None:
    config = load(tmp_path, """
job.name=x
systems.kafka.samza.factory=org.apache.samza.system.kafka.KafkaSystemFactory
systems.kafka.bootstrap.servers=localhost:9092
systems.kafka.consumer.auto.offset.reset=earliest
systems.kafka.consumer.fetch.min.bytes=1
systems.kafka.producer.linger.ms=5
systems.kafka.samza.key.serde=string
systems.kafka.samza.msg.serde=json
systems.kafka.streams.page.views.samza.msg.serde=avro
systems.kafka.streams.raw.samza.key.serde=bytes
systems.kafka.streams.raw.samza.offset.default=oldest
systems.other.producer.bootstrap.servers=other:9092
""")
    kafka = config.systems["kafka"]
    assert kafka.bootstrap_servers == "localhost:9092"
    assert kafka.consumer == {"auto.offset.reset": "earliest", "fetch.min.bytes": "1"}
    assert kafka.producer == {"linger.ms": "5"}
    assert (kafka.key_serde, kafka.msg_serde) == ("string", "json")
    assert kafka.streams == {"page.views": StreamConfig("page.views", None, "avro"),
                             "raw": StreamConfig("raw", "bytes", None)}
    assert config.stream_serdes(StreamRef("kafka", "page.views")) == ("string", "avro")
    assert config.stream_serdes(StreamRef("kafka", "raw")) == ("bytes", "json")
    assert config.stream_serdes(StreamRef("kafka", "unlisted")) == ("string", "json")
    assert config.stream_serdes(StreamRef("nowhere", "t")) == (None, None)
    other = config.systems["other"]
    assert other.bootstrap_servers == "other:9092" and other.key_serde is None


# --- the Samza documentation's example --------------------------------------------------------


def test_samza_doc_store_snippet(tmp_path: Path) -> None:
    lines = [line for line in SAMZA_DOC_SNIPPET.read_text(encoding="utf-8").splitlines()
             if line.startswith(("stores.my-store.", "serializers.registry."))]
    assert len(lines) >= 4
    config = load(tmp_path, "\n".join(["job.name=x", *lines]))
    store = config.stores["my-store"]
    assert (store.factory, store.key_serde, store.msg_serde) == ("rocksdb", "string", "string")
    assert store.changelog == StreamRef("kafka", "my-store-changelog")
    spec = config.serde_spec("string", "stores.my-store.key.serde")
    assert spec.factory == "org.apache.samza.serializers.StringSerdeFactory"
    assert config.serde_spec("string").factory == spec.factory

    # ... and opens a working, persistent RocksDB store from it, unchanged.
    from millpond.serdes import serdes_for
    from millpond.stores import build_store
    from millpond.tasks.storage import open_engine

    key_serde, msg_serde = serdes_for(config, store)
    for round_ in range(2):
        engine = open_engine(store, tmp_path / "my-store")
        kv = build_store("my-store", engine, key_serde, msg_serde, store.object_cache_size,
                         store.write_batch_size)
        if round_ == 0:
            kv.put_all([("b", "2"), ("a", "1"), ("c", "3")])
            kv.delete("c")
        else:
            with kv.all() as entries:
                assert list(entries) == [("a", "1"), ("b", "2")]
            assert kv.get("c") is None
        kv.flush()
        kv.close()


def test_job_changelog_system_gives_every_store_a_default_changelog(tmp_path: Path) -> None:
    config = load(tmp_path, "\n".join([
        "job.name=clicks", "job.id=7", "job.changelog.system=kafka",
        "stores.a.factory=rocksdb", "stores.a.key.serde=string", "stores.a.msg.serde=json",
        "stores.b.factory=rocksdb", "stores.b.key.serde=string", "stores.b.msg.serde=json",
        "stores.b.changelog=own-topic",
    ]))
    assert config.stores["a"].changelog == StreamRef("kafka", "clicks-7-a-changelog")
    assert config.stores["b"].changelog == StreamRef("kafka", "own-topic")
    plain = load(tmp_path, "job.name=x\nstores.a.factory=rocksdb\nstores.a.key.serde=string\n"
                           "stores.a.msg.serde=json")
    assert plain.stores["a"].changelog is None

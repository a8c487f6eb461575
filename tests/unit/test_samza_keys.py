"""Every Samza key has a fate; ignored keys log once and never stop a job; errors name the file."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import pytest

from millpond.config import Config, ConfigError, ConfigWarning
from millpond.config.librdkafka import known_to_librdkafka
from millpond.config.samza_keys import SAMZA_KEYS, ignored_reason, markdown_table, samza_key

DATA = Path(__file__).parent / "data" / "samza"
BASE = "job.name=j\ntask.inputs=kafka.in\nsystems.kafka.bootstrap.servers=127.0.0.1:9092\n"
STORE = ("stores.s.factory=rocksdb\nstores.s.key.serde=string\nstores.s.msg.serde=json\n"
         "stores.s.changelog=kafka.s-log\n")


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Config:
    path = tmp_path / "job.properties"
    path.write_text(text)
    return Config.load(path, env=env or {})


def error_of(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return info.value


def table_keys() -> list[str]:
    """The keys of Samza's configuration table, placeholders filled with sample names."""
    keys = []
    for line in (DATA / "samza-configuration-table-keys.txt").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key = re.sub(r"_[a-z-]+_", "name1", line).replace("..", ".")
        keys.append(key.replace("*", "some.setting"))
    return keys


def test_every_key_of_samzas_table_has_a_fate() -> None:
    keys = table_keys()
    assert len(keys) > 200  # the whole table, not a sample
    no_fate = [key for key in keys if samza_key(key) is None]
    assert no_fate == []


@pytest.mark.parametrize(("key", "fate"), [
    ("stores.s.changelog", "supported"),
    ("stores.s.changelog.kafka.cleanup.policy", "supported"),
    ("stores.s.changelog.min.compaction.lag.ms", "mapped"),
    ("stores.s.rocksdb.metrics.list", "ignored"),
    ("stores.default.changelog.replication.factor", "mapped"),
    ("systems.kafka.consumer.zookeeper.connect", "ignored"),
    ("systems.kafka.consumer.fetch.min.bytes", "mapped"),
    ("systems.kafka.streams.a.b.samza.msg.serde", "supported"),
    ("yarn.package.path", "ignored"),
    ("task.broadcast.inputs", "refused"),
    ("metrics.reporter.snapshot.class", "ignored"),
])
def test_most_specific_row_wins(key: str, fate: str) -> None:
    entry = samza_key(key)
    assert entry is not None and entry.fate == fate


def test_markdown_table_lists_every_row_and_the_doc_is_current() -> None:
    table = markdown_table()
    assert all(f"`{entry.pattern}`" in table for entry in SAMZA_KEYS)
    doc = Path(__file__).parents[2] / "docs" / "samza-keys.md"
    assert table in doc.read_text(), "regenerate: python -m millpond.config.samza_keys"


def test_librdkafka_probe_tells_java_keys_from_librdkafka_keys() -> None:
    for key in ("zookeeper.connect", "key.serializer", "value.deserializer", "no.such.key"):
        assert not known_to_librdkafka(key, "consumer")
        assert not known_to_librdkafka(key, "producer")
    for key in ("fetch.min.bytes", "session.timeout.ms", "heartbeat.interval.ms", "linger.ms",
                "group.id", "client.id", "max.in.flight"):
        assert known_to_librdkafka(key, "consumer") and known_to_librdkafka(key, "producer")


def test_java_client_keys_are_left_out_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="millpond.config")
    config = load(tmp_path, BASE + """
systems.kafka.consumer.zookeeper.connect=localhost:2181/
systems.kafka.consumer.auto.commit.enable=false
systems.kafka.consumer.auto.offset.reset=largest
systems.kafka.consumer.fetch.min.bytes=1
systems.kafka.producer.key.serializer=org.apache.kafka.common.serialization.StringSerializer
systems.kafka.producer.linger.ms=5
yarn.package.path=file:///tmp/x.tgz
metrics.reporters=snapshot
""")
    kafka = config.systems["kafka"]
    assert kafka.consumer == {"auto.offset.reset": "largest", "fetch.min.bytes": "1"}
    assert kafka.producer == {"linger.ms": "5"}
    ignored = {"systems.kafka.consumer.zookeeper.connect",
               "systems.kafka.consumer.auto.commit.enable",
               "systems.kafka.producer.key.serializer", "yarn.package.path"}
    assert set(config.ignored) == ignored
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    for key in ignored:
        mine = [line for line in lines if line.startswith(f"ignoring {key} (")]
        assert len(mine) == 1, (key, lines)
        assert "job.properties:" in mine[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_samza_store_keys_are_accepted_without_a_warning(tmp_path: Path) -> None:
    text = BASE + STORE + """
stores.s.changelog.max.message.size.bytes=2000
stores.s.disallow.large.messages=false
stores.s.drop.large.messages=true
stores.s.rocksdb.compaction.style=level
stores.s.rocksdb.metrics.list=rocksdb.estimate-num-keys
stores.s.changelog.min.compaction.lag.ms=60000
stores.s.rocksdb.delete.obsolete.files.period.micros=1000000
stores.s.rocksdb.max.manifest.file.size=1048576
stores.s.write.batch.size=0
stores.s.object.cache.size=0
stores.default.changelog.replication.factor=1
stores-default.rocksdb.max.manifest.file.size.bytes=1073741824
"""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        config = load(tmp_path, text)
    store = config.stores["s"]
    assert set(config.stores) == {"s"}  # stores.default.* holds defaults, it is no store
    assert (store.max_message_size, store.large_messages) == (2000, "drop")
    assert store.changelog_topic_config == {"min.compaction.lag.ms": "60000"}
    assert store.changelog_replication_factor == 1
    assert (store.object_cache_size, store.write_batch_size) == (0, 0)
    assert set(config.ignored) == {"stores.s.rocksdb.metrics.list",
                                   "stores-default.rocksdb.max.manifest.file.size.bytes"}


def test_store_defaults_and_large_message_settings(tmp_path: Path) -> None:
    config = load(tmp_path, BASE + STORE + STORE.replace("stores.s.", "stores.t.") + """
stores.default.changelog.min.compaction.lag.ms=5000
stores.t.changelog.min.compaction.lag.ms=7000
stores.t.disallow.large.messages=true
stores.t.drop.large.messages=true
""")
    s, t = config.stores["s"], config.stores["t"]
    assert s.changelog_topic_config == {"min.compaction.lag.ms": "5000"}
    assert t.changelog_topic_config == {"min.compaction.lag.ms": "7000"}
    assert (s.max_message_size, s.large_messages) == (1_048_576, None)  # Samza's defaults
    assert t.large_messages == "disallow"  # disallow wins, as in Samza


def test_min_compaction_lag_given_twice_is_refused(tmp_path: Path) -> None:
    err = error_of(tmp_path, BASE + STORE + "stores.s.changelog.kafka.min.compaction.lag.ms=1\n"
                   "stores.s.changelog.min.compaction.lag.ms=2\n")
    assert (err.key, err.line) == ("stores.s.changelog.min.compaction.lag.ms", 9)


def test_typo_in_a_store_key_still_suggests_the_closest(tmp_path: Path) -> None:
    with pytest.warns(ConfigWarning, match="did you mean 'stores.s.drop.large.messages'"):
        load(tmp_path, BASE + STORE + "stores.s.drop.large.message=true\n")


def test_placeholder_in_an_ignored_key_never_stops_a_job(tmp_path: Path) -> None:
    config = load(tmp_path, BASE + "yarn.package.path=file://${basedir}/target/"
                  "${project.artifactId}-${pom.version}-dist.tar.gz\n"
                  "systems.kafka.consumer.zookeeper.connect=${ZK}:2181\n")
    assert config.get("yarn.package.path") == ("file://${basedir}/target/"
                                              "${project.artifactId}-${pom.version}-dist.tar.gz")


def test_placeholder_in_a_used_key_still_fails_clearly(tmp_path: Path) -> None:
    err = error_of(tmp_path, BASE + "task.window.ms=${WINDOW}\n")
    assert (err.key, err.line) == ("task.window.ms", 4)
    assert "WINDOW" in str(err) and "job.properties:4" in str(err)
    err = error_of(tmp_path, BASE + "systems.kafka.consumer.fetch.min.bytes=${MIN}\n")
    assert err.key == "systems.kafka.consumer.fetch.min.bytes"
    assert ignored_reason("systems.kafka.consumer.fetch.min.bytes") is None


@pytest.mark.parametrize(("text", "key", "example"), [
    ("task.inputs=kafka.in\n", "job.name", "job.name="),
    ("job.name=\n", "job.name", "job.name="),
])
def test_missing_job_name_names_the_file(tmp_path: Path, text: str, key: str,
                                         example: str) -> None:
    err = error_of(tmp_path, text)
    assert err.key == key and err.file == str(tmp_path / "job.properties")
    assert example in str(err) and str(err).startswith(str(tmp_path / "job.properties"))
    assert "<default>" not in str(err)


def test_missing_run_keys_name_the_file_key_and_an_example(tmp_path: Path) -> None:
    from millpond.tasks.container import Container

    path = str(tmp_path / "job.properties")
    cases = [
        ("job.name=j\ntask.inputs=kafka.in\nsystems.kafka.bootstrap.servers=h:1\n",
         "task.class", "task.class="),
        ("job.name=j\ntask.class=tests.jobs.counting.Counter\n"
         "systems.kafka.bootstrap.servers=h:1\n", "task.inputs", "task.inputs=kafka."),
        ("job.name=j\ntask.class=tests.jobs.counting.Counter\ntask.inputs=kafka.in\n",
         "systems.kafka.bootstrap.servers", "systems.kafka.bootstrap.servers=localhost:9092"),
    ]
    for text, key, example in cases:
        config = load(tmp_path, text)
        with pytest.raises(ConfigError) as info:
            Container(config)
        message = str(info.value)
        assert message.startswith(f"{path}: {key}: is missing"), message
        assert example in message


def test_empty_task_inputs_points_at_its_line(tmp_path: Path) -> None:
    from millpond.tasks.container import Container

    config = load(tmp_path, "job.name=j\ntask.class=tests.jobs.counting.Counter\ntask.inputs=\n")
    with pytest.raises(ConfigError, match=r"job.properties:3: task.inputs: is empty"):
        Container(config)


def test_offline_tools_name_the_file_for_missing_brokers(tmp_path: Path) -> None:
    from millpond.ops.offline import Job

    config = load(tmp_path, "job.name=j\n")
    with pytest.raises(ConfigError, match=r"job.properties: systems.kafka.bootstrap.servers"):
        Job(config)


def test_high_level_application_is_refused_in_one_line(tmp_path: Path) -> None:
    err = error_of(tmp_path, "app.class=samza.examples.FilterExample\njob.name=f\n")
    message = str(err)
    assert message.startswith(f"{tmp_path / 'job.properties'}:1: app.class: ")
    assert "StreamTask" in message and "task.class=" in message and "\n" not in message


def test_app_class_next_to_task_class_is_ignored(tmp_path: Path) -> None:
    config = load(tmp_path, BASE + "app.class=x.Y\ntask.class=tests.jobs.counting.Counter\n")
    assert "app.class" in config.ignored


def test_app_name_and_id_give_the_job_name_and_id(tmp_path: Path) -> None:
    config = load(tmp_path, "app.name=hello\napp.id=7\n")
    assert (config.job.name, config.job.id) == ("hello", "7")


def test_broadcast_inputs_are_refused(tmp_path: Path) -> None:
    err = error_of(tmp_path, BASE + "task.broadcast.inputs=kafka.b#0\n")
    assert (err.key, err.line) == ("task.broadcast.inputs", 4)
    assert "not supported" in str(err)


def test_stream_id_serdes_map_onto_topics(tmp_path: Path) -> None:
    config = load(tmp_path, BASE + """
systems.kafka.default.stream.samza.msg.serde=json
streams.pv.samza.physical.name=page-views
streams.pv.samza.key.serde=string
streams.clicks.samza.msg.serde=bytes
""")
    from millpond.config import StreamRef

    assert config.stream_serdes(StreamRef("kafka", "page-views")) == ("string", "json")
    assert config.stream_serdes(StreamRef("kafka", "clicks")) == (None, "bytes")
    assert config.stream_serdes(StreamRef("kafka", "other")) == (None, "json")


@pytest.mark.parametrize("key", [
    "systems.kafka.producer.delivery.report.only.error",
    "systems.kafka.delivery.report.only.error",
    "systems.kafka.consumer.error_cb",
])
def test_python_client_settings_are_refused_at_their_line(tmp_path: Path, key: str) -> None:
    """confluent-kafka takes these as a bool or a function; from a properties file each
    was a TypeError traceback from deep inside the client's constructor."""
    err = error_of(tmp_path, BASE + f"{key}=true\n")
    text = str(err)
    assert text.startswith(f"{tmp_path / 'job.properties'}:4: {key}: cannot be set"), text
    if "delivery" in key:
        assert "changelog offsets" in text
    else:
        assert "callback" in text

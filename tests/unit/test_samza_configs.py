"""Real Samza configs (hello-samza, Samza's docs) load into a millpond job unchanged, apart
from task.class naming a Python task; high-level applications get one clear refusal."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest

from millpond.config import Config, ConfigError, ConfigWarning
from millpond.tasks.container import Container

DATA = Path(__file__).parent / "data" / "samza"


def load(name: str) -> Config:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)  # no "did you mean" for Samza's keys
        return Config.load(DATA / name, env={})


def test_hello_samza_wikipedia_stats(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="millpond.config")
    config = load("hello-samza-wikipedia-stats.properties")
    container = Container(config)  # task class, serdes, inputs, brokers: all resolved
    assert container.inputs == ["wikipedia-edits"]
    assert container.consumer_conf["bootstrap.servers"] == "localhost:9092"
    kafka = config.systems["kafka"]
    assert "zookeeper.connect" not in kafka.consumer  # Java-only: never given to librdkafka
    assert kafka.consumer == {"auto.offset.reset": "largest"}
    store = config.stores["wikipedia-stats"]
    assert (store.object_cache_size, store.write_batch_size) == (0, 0)  # cache off, as Samza
    assert store.changelog_replication_factor == 1
    assert config.get("yarn.package.path", "").startswith("file://${basedir}/")
    assert config.job.window_ms == 10000
    assert set(config.ignored) == {
        "job.factory.class", "yarn.package.path",
        "metrics.reporter.snapshot.class", "metrics.reporter.snapshot.stream",
        "metrics.reporter.jmx.class", "systems.kafka.samza.factory",
        "systems.kafka.consumer.zookeeper.connect", "job.coordinator.system",
        "job.coordinator.replication.factor"}
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ignoring ")]
    reporters = [line for line in logged if line.startswith("ignoring metrics reporter ")]
    assert len(logged) - len(reporters) == len(config.ignored)  # one line per key
    assert any("yarn.package.path" in line and "YARN" in line for line in logged)
    # metrics.reporters=snapshot,jmx: Samza's Java reporters, each named once and not run
    assert [line.split()[3] for line in reporters] == ["snapshot", "jmx"]


def test_hello_samza_wikipedia_parser() -> None:
    config = load("hello-samza-wikipedia-parser.properties")
    container = Container(config)
    assert container.inputs == ["wikipedia-raw"]
    # the metrics stream's serde is Samza's MetricsSnapshotSerdeFactory: JSON
    from millpond.config import StreamRef

    key_serde, msg_serde = container.serdes.of(StreamRef("kafka", "metrics"))
    assert key_serde is None and msg_serde.to_bytes({"a": 1}) == b'{"a":1}'


def test_samza_docs_serialization_example() -> None:
    config = load("samza-docs-serialization.properties")
    container = Container(config)
    from millpond.config import StreamRef

    key_serde, msg_serde = container.serdes.of(StreamRef("kafka", "PageViewEvent"))
    assert key_serde.to_bytes(-1) == b"\xff\xff\xff\xff"  # Samza's IntegerSerde
    store = config.stores["LastPageViewPerUser"]
    assert (store.factory, str(store.changelog)) == ("rocksdb", "kafka.last-page-view-per-user")


def test_samza_docs_store_snippet_needs_only_a_job_name() -> None:
    path = DATA.parent / "samza-doc-store-snippet.properties"
    with pytest.raises(ConfigError, match=f"^{path}: job.name: is missing"):
        Config.load(path, env={})
    config = Config.load(path, overrides=["job.name=j"], env={})
    assert str(config.stores["my-store"].changelog) == "kafka.my-store-changelog"


@pytest.mark.parametrize("name", ["hello-samza-wikipedia-application.properties",
                                  "hello-samza-wikipedia-stats-task-application.properties"])
def test_high_level_applications_are_refused_in_one_line(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        Config.load(DATA / name, env={})
    message = str(info.value)
    line = next(i for i, text in enumerate((DATA / name).read_text().splitlines(), 1)
                if text.startswith("app.class="))
    assert message.startswith(f"{DATA / name}:{line}: app.class: ")
    assert "\n" not in message
    assert "low-level StreamTask" in message and "task.class=" in message

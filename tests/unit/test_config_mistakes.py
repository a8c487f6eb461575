"""Config mistakes are named at load: an unknown key in millpond's namespaces warns with the
closest known key (an error with job.config.strict=true), a key set twice warns with both
lines, an int outside its documented range is refused at its line; Samza's own keys, the
task's own keys and a dataflow app's compiled keys never warn."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from millpond.config import Config, ConfigError, ConfigWarning, schema
from millpond.streams.compile import load_config

REPO = Path(__file__).parents[2]
BASE = ("job.name=j\ntask.class=tests.jobs.counting.Counter\ntask.inputs=kafka.in\n"
        "systems.kafka.bootstrap.servers=127.0.0.1:9092\n")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.properties"
    path.write_text(BASE + text)
    return path


def load_warnings(path: Path) -> tuple[Config, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = Config.load(path, env={})
    return config, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


@pytest.mark.parametrize("line, hint", [
    ("task.comit.ms=300", "task.commit.ms"),
    ("job.logged.store.base.dri=/tmp/x", "job.logged.store.base.dir"),
    ("systems.kafka.bootstrap.server=h:1", "systems.kafka.bootstrap.servers"),
    ("serializers.registy.x.class=json", "serializers.registry.x.class"),
    ("task.no.such.thing=1", None),
    ("metrics.reporterz=prometheus", "metrics.reporters"),
    ("app.dropped.operator=x", "app.dropped.operators"),
])
def test_an_unknown_key_warns_at_its_line_with_the_closest_key(
        tmp_path: Path, line: str, hint: str | None) -> None:
    path = write(tmp_path, line + "\n")
    config, lines = load_warnings(path)
    key = line.split("=")[0]
    assert len(lines) == 1 and lines[0].startswith(f"{path}:5: {key}: unknown key"), lines
    assert (f"did you mean {hint}?" in lines[0]) if hint else "did you mean" not in lines[0]
    assert config.job.commit_ms == schema.int_default("task.commit.ms")  # ignored, as said


def test_strict_makes_an_unknown_key_an_error_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "job.config.strict=true\ntask.comit.ms=300\n")
    with pytest.raises(ConfigError) as info:
        Config.load(path, env={})
    assert str(info.value).startswith(f"{path}:6: task.comit.ms: unknown key")
    assert "did you mean task.commit.ms?" in str(info.value)
    assert "job.config.strict=true" in str(info.value)
    # a store's unknown key too (without strict it is the store parser's warning)
    path = write(tmp_path, "job.config.strict=true\nstores.s.factory=rocksdb\n"
                 "stores.s.key.serde=string\nstores.s.msg.serde=json\nstores.s.write.bach.size=1\n")
    with pytest.raises(ConfigError, match=r":9: stores.s.write.bach.size: .*did you mean "
                                          r"stores.s.write.batch.size\?"):
        Config.load(path, env={})


def test_a_key_set_twice_warns_with_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "task.commit.ms=300\n# later\ntask.commit.ms=500\n")
    config, lines = load_warnings(path)
    assert lines == [f"{path}:7: task.commit.ms is set twice, at {path}:5 and {path}:7; the "
                     f"value at {path}:7 is used"]
    assert config.job.commit_ms == 500  # as Java's Properties.load: the later one
    (tmp_path / "strict").mkdir()
    path = write(tmp_path / "strict", "job.config.strict=true\ntask.inputs=kafka.other\n")
    with pytest.raises(ConfigError, match=rf"^{path}:6: task.inputs is set twice, at {path}:3"):
        Config.load(path, env={})


def test_an_override_is_not_a_duplicate(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        config = Config.load(write(tmp_path, "task.commit.ms=300\n"),
                             overrides=["task.commit.ms=700"], env={})
    assert config.job.commit_ms == 700


@pytest.mark.parametrize("line, message", [
    ("task.commit.ms=-5", "must be at least 0, got -5"),
    ("task.window.ms=-2", "must be at least -1, got -2"),
    ("task.timeout.ms=-1", "must be at least 0, got -1"),
])
def test_ints_outside_their_range_are_refused_at_their_line(
        tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path, line + "\n")
    with pytest.raises(ConfigError) as info:
        Config.load(path, env={})
    assert str(info.value) == f"{path}:5: {line.split('=')[0]}: {message}"


def test_samza_keys_task_keys_and_compiled_apps_do_not_warn(tmp_path: Path) -> None:
    """Samza's keys (ignored ones included) and the task's own keys outside millpond's
    namespaces load quietly; so does every shipped config, dataflow apps compiled."""
    path = write(tmp_path, "systems.kafka.streams.in.samza.offset.default=oldest\n"
                 "systems.kafka.samza.factory=org.apache.samza.system.kafka.KafkaSystemFactory\n"
                 "yarn.package.path=file:///x.tgz\ntask.opts=-Xmx1g\ncounts.stream=kafka.out\n"
                 "systems.kafka.consumer.fetch.min.bytes=1\nsystems.kafka.linger.ms=5\n")
    assert load_warnings(path)[1] == []
    shipped = sorted((REPO / "config").glob("*.properties"))
    assert len(shipped) >= 5
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        for config in shipped:
            load_config(config)

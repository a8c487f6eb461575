"""A dataflow app run by `millpond run` against the broker: the same output as the
StreamTask it replaces, and the same tooling on its stores."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    MILLPOND,
    REPO,
    create_topic,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 3


def _config(path: Path, bootstrap: str, name: str, state: Path, **keys: str) -> Path:
    props = {
        "job.name": name,
        "task.commit.ms": 500,
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "job.logged.store.base.dir": str(state),
        **keys,
    }
    return write_properties(path, props)


def _outputs(bootstrap: str, topic: str) -> Counter[tuple[str, int]]:
    return Counter((m.key().decode(), json.loads(m.value())) for m in read_topic(bootstrap, topic))


def test_the_count_app_matches_the_streamtask_counter(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, app_out, task_out = topic_name("in"), topic_name("app-out"), topic_name("task-out")
    for topic in (source, app_out, task_out):
        create_topic(kafka_bootstrap, topic, PARTITIONS)
    expected = produce_users(kafka_bootstrap, source, 3000, 50, PARTITIONS)
    # The app's topics come from its module: point them at this test's topics.
    module = tmp_path / "counts_app.py"
    module.write_text(
        "from millpond.streams import App\n"
        "app = App()\n"
        f"app.source({source!r}).map(lambda v: v['user_id']).count('counts').to({app_out!r})\n")
    app_conf = _config(tmp_path / "app.properties", kafka_bootstrap, topic_name("app"),
                       tmp_path / "app-state", **{"app.class": "counts_app:app"})
    task_conf = _config(tmp_path / "task.properties", kafka_bootstrap, topic_name("task"),
                        tmp_path / "task-state", **{
                            "task.class": "tests.jobs.counting.Counter",
                            "task.inputs": f"kafka.{source}",
                            "emit.stream": f"kafka.{task_out}",
                            "stores.counts.factory": "rocksdb",
                            "stores.counts.key.serde": "string",
                            "stores.counts.msg.serde": "json",
                            "stores.counts.changelog": f"kafka.{topic_name('task')}-counts"})
    env = {"PYTHONPATH": str(tmp_path)}
    for conf in (app_conf, task_conf):
        done = run_job(conf, "--bounded", env=env, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    assert _outputs(kafka_bootstrap, app_out) == _outputs(kafka_bootstrap, task_out)
    assert sum(_outputs(kafka_bootstrap, app_out).values()) == 3000
    # The app's store is an ordinary store: dump it; rebuild it from its changelog (named
    # after the job and the operator) and dump it again.
    assert _dump(app_conf, env) == dict(expected)
    changelog = f"{topic_name('app')}-1-counts-changelog"
    assert len(read_topic(kafka_bootstrap, changelog)) >= len(expected)
    full = _cli(env, "restore", "--config", str(app_conf), "--full")
    assert full.returncode == 0, full.stdout + full.stderr
    assert _dump(app_conf, env) == dict(expected)


def _producer(bootstrap: str, topic: str) -> Callable[[list[dict[str, str]]], None]:
    """``produce(values)``: each value as JSON under key ``u``, then wait for delivery."""
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(values: list[dict[str, str]]) -> None:
        for value in values:
            producer.produce(topic, json.dumps(value), b"u")
        assert producer.flush(30) == 0

    return produce


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MILLPOND, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def _dump(conf: Path, env: dict[str, str], store: str = "counts") -> dict[str, int]:
    out = _cli(env, "store", "dump", "--config", str(conf), "--store", store)
    assert out.returncode == 0, out.stdout + out.stderr
    return {row["key"]: row["value"] for row in map(json.loads, out.stdout.splitlines())}


def test_a_failing_operator_stops_the_job_naming_it_and_the_message(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """A first run counts 30 records; then the 31st record makes the app's map raise: the job
    stops with one line naming the operator, the topic, partition and offset, and what the
    first run committed stays (the checkpoint resumes at offset 30, the count is 30)."""
    source, out = topic_name("in"), topic_name("out")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, out, 1)
    produce = _producer(kafka_bootstrap, source)
    (tmp_path / "failing_app.py").write_text(
        "from millpond.streams import App\n"
        "app = App()\n"
        f"app.source({source!r}).map(lambda v: v['user_id']).count('counts').to({out!r})\n")
    conf = _config(tmp_path / "app.properties", kafka_bootstrap, topic_name("app"),
                   tmp_path / "state", **{"app.class": "failing_app:app"})
    env = {"PYTHONPATH": str(tmp_path)}
    produce([{"user_id": "u"}] * 30)
    first = run_job(conf, "--bounded", env=env, timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    produce([{"name": "no user_id"}] + [{"user_id": "u"}] * 9)
    done = run_job(conf, "--bounded", env=env, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert done.returncode == 1, done.stderr[-3000:]  # a poison record: a runtime failure
    assert len(errors) == 1, done.stderr[-3000:]
    assert f"{source}[0] at offset 30" in errors[0]
    assert "operator map #1" in errors[0] and "KeyError" in errors[0], errors[0]
    shown = _cli(env, "checkpoint", "show", "--config", str(conf), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["partition-0"]["inputs"][source] == 30
    assert _dump(conf, env) == {"u": 30}
    # With a dead-letter topic the failing record goes there, naming the operator, and the
    # 9 records after it are counted.
    dlq = topic_name("dead")
    create_topic(kafka_bootstrap, dlq, 1)
    on = run_job(conf, "--bounded", "--config-override", f"task.dlq.stream=kafka.{dlq}",
                 env=env, timeout=120)
    assert on.returncode == 0, on.stderr[-3000:]
    [dead] = read_topic(kafka_bootstrap, dlq)
    headers = dict(dead.headers())
    assert json.loads(dead.value()) == {"name": "no user_id"}
    assert headers["millpond.offset"] == b"30" and headers["millpond.stage"] == b"process"
    assert b"operator map #1" in headers["millpond.error"]
    assert _dump(conf, env) == {"u": 39}


def test_a_renamed_stateful_operator_is_refused_and_nothing_is_lost(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """The app's count is renamed between two runs: the second run is refused naming the old
    operator; with its old name back the count goes on from the committed state; listed in
    app.dropped.operators, the renamed one starts from nothing."""
    source, out = topic_name("in"), topic_name("out")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, out, 1)
    produce = _producer(kafka_bootstrap, source)
    def app(store: str) -> None:
        (tmp_path / "renamed_app.py").write_text(
            "from millpond.streams import App\n"
            "app = App()\n"
            f"app.source({source!r}).count({store!r}).to({out!r})\n")

    conf = _config(tmp_path / "app.properties", kafka_bootstrap, topic_name("app"),
                   tmp_path / "state", **{"app.class": "renamed_app:app"})
    env = {"PYTHONPATH": str(tmp_path)}
    app("visits")
    produce([{"user_id": "u"}] * 10)
    assert run_job(conf, "--bounded", env=env, timeout=120).returncode == 0
    app("views")  # renamed
    produce([{"user_id": "u"}] * 5)
    refused = run_job(conf, "--bounded", env=env, timeout=120)
    errors = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert refused.returncode == 2 and len(errors) == 1, refused.stderr[-3000:]
    assert "operator(s) visits" in errors[0] and "app.dropped.operators=visits" in errors[0]
    app("visits")  # the old name back: the state is there, the 5 new views count on
    assert run_job(conf, "--bounded", env=env, timeout=120).returncode == 0
    assert _dump(conf, env, "visits") == {"u": 15}
    app("views")
    produce([{"user_id": "u"}] * 1)
    dropped = run_job(conf, "--bounded", "--config-override", "app.dropped.operators=visits",
                      env=env, timeout=120)
    assert dropped.returncode == 0, dropped.stderr[-3000:]
    assert _dump(conf, env, "views") == {"u": 1}  # the new operator started from nothing

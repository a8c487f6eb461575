"""A dead-lettered record is skipped whole: the store writes its process() made before it
raised are undone, in the store and in its changelog, under every guarantee."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    MILLPOND,
    REPO,
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

def millpond_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MILLPOND, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


LAYOUTS = {
    "cache": {},
    "write-through": {"stores.counts.write.batch.size": 0},  # a write-down per put
    "no-cache": {"stores.counts.object.cache.size": 0},
}


# every guarantee, each with another store layout (tests/unit/test_store_undo.py runs every
# layout against the engines)
@pytest.mark.parametrize(("guarantee", "layout"), [
    ("at-least-once", "no-cache"), ("effectively-once", "cache"),
    ("exactly-once", "write-through"),
])
def test_a_record_that_writes_then_raises_leaves_no_trace(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
    guarantee: str, layout: str,
) -> None:
    source, dlq, job = topic_name("in"), topic_name("dlq"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    expected = produce_users(kafka_bootstrap, source, 300, 10, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(source, key=b"user-1", partition=0,
                     value=json.dumps({"user_id": "user-1", "poison": True}).encode())
    producer.flush(30)
    expected += produce_users(kafka_bootstrap, source, 200, 10, 1)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, job, source, tmp_path / "s",
        **{"task.class": "tests.jobs.half_done.HalfDoneCounter",
           "task.processing.guarantee": guarantee, "task.dlq.stream": f"kafka.{dlq}",
           **LAYOUTS[layout]}))
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "3 store writes undone" in run.stderr, run.stderr[-2000:]
    assert dump_store(conf, "counts") == dict(expected)
    # the changelog, as compaction will leave it, holds the same state
    compacted: dict[str, object] = {}
    for rec in read_topic(kafka_bootstrap, f"{job}-counts-changelog"):
        if rec.value() is None:
            compacted.pop(rec.key().decode(), None)
        else:
            compacted[rec.key().decode()] = json.loads(rec.value())
    assert compacted == dict(expected)
    [dead] = read_topic(kafka_bootstrap, dlq)
    headers = dict(dead.headers())
    assert headers["millpond.offset"] == b"300"
    assert headers["millpond.stage"] == b"process"
    assert headers["millpond.store.writes.undone"] == b"3"
    assert b"half done at offset 300" in headers["millpond.error"]


def test_a_dataflow_record_failing_after_a_stateful_operator_is_undone(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """The streams API runs in the same loop: a record whose stateful_map wrote its state and
    whose next operator raised is dead-lettered with that write undone."""
    source, dlq = topic_name("in"), topic_name("dead")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, dlq, 1)
    (tmp_path / "undo_app.py").write_text(
        "from millpond.streams import App\n"
        "app = App()\n"
        f"app.source({source!r}).stateful_map('seen', lambda s, v: ((s or 0) + 1, v))"
        ".map(lambda v: v['user_id']).count('counts')\n")
    conf = write_properties(tmp_path / "app.properties", {
        "job.name": topic_name("app"), "app.class": "undo_app:app", "task.commit.ms": 500,
        "systems.kafka.bootstrap.servers": kafka_bootstrap,
        "systems.kafka.samza.key.serde": "string", "systems.kafka.samza.msg.serde": "json",
        "job.logged.store.base.dir": str(tmp_path / "state"), "task.dlq.stream": f"kafka.{dlq}"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in [{"user_id": "u"}] * 5 + [{"name": "no user_id"}] + [{"user_id": "u"}] * 5:
        producer.produce(source, json.dumps(value), b"u")
    assert producer.flush(30) == 0
    env = {"PYTHONPATH": str(tmp_path)}
    run = run_job(conf, "--bounded", env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    [dead] = read_topic(kafka_bootstrap, dlq)
    headers = dict(dead.headers())
    assert headers["millpond.offset"] == b"5"
    assert headers["millpond.store.writes.undone"] == b"1"
    for store in ("seen", "counts"):
        out = millpond_env(env, "store", "dump", "--config", str(conf), "--store", store)
        assert out.returncode == 0, out.stdout + out.stderr
        rows = [json.loads(line) for line in out.stdout.splitlines()]
        assert [(r["key"], r["value"]) for r in rows] == [("u", 10)], store

"""A dead-lettered record is skipped whole: the store writes its process() made before it
raised are undone, in the store and in its changelog, under every guarantee."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

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

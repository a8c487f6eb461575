"""A global table run by `millpond run` on the broker: a table topic of 3 partitions, a
stream of 2 (so a job of 2 tasks), each task holding the whole table in its store, read as a
side input before its first record, and every stream record joined with it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from millpond.changelog.checkpoint import Checkpoint, checkpoint_topic
from tests.kafka_util import create_topic, millpond, read_topic, run_job
from tests.streams.test_app_job import _config

pytestmark = pytest.mark.kafka

TABLE_PARTITIONS, STREAM_PARTITIONS = 3, 2
READ = re.compile(r"task partition-(\d+) side inputs ready: store customers read (\d+) records")


def _send(producer: Producer, topic: str, partitions: int, records: list[tuple[str, Any]],
          ) -> None:
    """Each ``(key, value)`` (None: a tombstone) to partition ``<key's number> % partitions``,
    so every partition of the topic holds some."""
    for key, value in records:
        producer.produce(topic, None if value is None else json.dumps(value), key,
                         partition=int(key[1:]) % partitions)
    assert producer.flush(30) == 0


def _run(conf: Path) -> str:
    done = run_job(conf, "--bounded", timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def _joined(bootstrap: str, out: str) -> dict[int, tuple[str, str | None]]:
    """Order id -> (the output's key, the region it was joined with); one output per order."""
    rows = [(m.key().decode(), json.loads(m.value())) for m in read_topic(bootstrap, out)]
    joined = {order["id"]: (key, order["region"]) for key, order in rows}
    assert len(joined) == len(rows), "an order was joined twice"
    return joined


def _copy(conf: Path, task: int) -> dict[str, Any]:
    """Task ``task``'s copy of the table, through `millpond store dump`."""
    out = millpond("store", "dump", "--config", str(conf), "--store", "customers",
                   "--partition", str(task))
    assert out.returncode == 0, out.stderr
    return {row["key"]: row["value"] for row in map(json.loads, out.stdout.splitlines())}


def test_every_task_joins_against_the_whole_table(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    customers, orders, out = topic_name("customers"), topic_name("orders"), topic_name("out")
    create_topic(kafka_bootstrap, customers, TABLE_PARTITIONS, **{"cleanup.policy": "compact"})
    create_topic(kafka_bootstrap, orders, STREAM_PARTITIONS)
    create_topic(kafka_bootstrap, out, STREAM_PARTITIONS)
    name = topic_name("job")
    conf = _config(tmp_path / "app.properties", kafka_bootstrap, name, tmp_path / "state",
                   **{"app.class": "tests.streams.apps:order_regions",
                      "customers.topic": customers, "orders.topic": orders, "out.topic": out,
                      "task.processing.guarantee": "exactly-once"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    table: dict[str, Any] = {f"c{j}": {"region": f"r{j}"} for j in range(30)}
    _send(producer, customers, TABLE_PARTITIONS, [*table.items(), ("c7", None), ("c8", None),
                                                  ("c9", {"region": "moved"})])
    table = {**{k: v for k, v in table.items() if k not in ("c7", "c8")}, "c9": {"region": "moved"}}
    # every order's customer: any partition of the table, whatever the order's partition
    first = [(f"o{i}", {"id": i, "customer": f"c{(i * 7) % 33}"}) for i in range(60)]
    _send(producer, orders, STREAM_PARTITIONS, first)

    log = _run(conf)
    assert _joined(kafka_bootstrap, out) == {
        order["id"]: (key, (table.get(order["customer"]) or {}).get("region"))
        for key, order in first}
    # each task read all 3 partitions (33 records) before its first order, into its own copy
    assert {m[1]: int(m[2]) for m in READ.finditer(log)} == {"0": 33, "1": 33}
    assert _copy(conf, 0) == _copy(conf, 1) == table
    checkpoints = [Checkpoint.from_bytes(m.value())
                   for m in read_topic(kafka_bootstrap, checkpoint_topic(name, "1"))]
    assert {c.partition for c in checkpoints} == {0, 1}
    for ckpt in checkpoints:
        assert set(ckpt.side_inputs["customers"]) == {f"{customers}#{p}" for p in range(3)}
        assert "customers" not in ckpt.changelogs  # no changelog: the topic is the source

    # An update and a delete, then more orders: the restart resumes each partition where
    # its checkpoint says and reads only the 2 changes.
    _send(producer, customers, TABLE_PARTITIONS, [("c1", {"region": "north"}), ("c2", None)])
    table = {**{k: v for k, v in table.items() if k != "c2"}, "c1": {"region": "north"}}
    second = [(f"o{i}", {"id": i, "customer": f"c{i % 4}"}) for i in range(60, 72)]
    _send(producer, orders, STREAM_PARTITIONS, second)
    log = _run(conf)
    joined = _joined(kafka_bootstrap, out)
    assert {i: joined[i] for i in range(60, 72)} == {
        order["id"]: (key, (table.get(order["customer"]) or {}).get("region"))
        for key, order in second}
    assert {m[1]: int(m[2]) for m in READ.finditer(log)} == {"0": 2, "1": 2}

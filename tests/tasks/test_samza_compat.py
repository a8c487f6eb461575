"""Samza compatibility on the real broker: a changelog in Samza's byte layout restores to the
same values; large values are refused or dropped as Samza does, never silently lost."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    create_topic,
    dump_store,
    latest_by_key,
    millpond,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

SAMZA = "org.apache.samza.serializers."


# --- a changelog written in Samza's byte layout -----------------------------------------------

def samza_int(value: int) -> bytes:
    return struct.pack(">i", value)  # Samza's IntegerSerde: ByteBuffer.allocate(4).putInt


def samza_long(value: int) -> bytes:
    return struct.pack(">q", value)  # Samza's LongSerde: ByteBuffer.allocate(8).putLong


def samza_double(value: float) -> bytes:
    return struct.pack(">d", value)  # Samza's DoubleSerde: ByteBuffer.allocate(8).putDouble


def samza_uuid(value: uuid.UUID) -> bytes:
    msb, lsb = value.int >> 64, value.int & (2**64 - 1)  # UUIDSerde: putLong(msb).putLong(lsb)
    return struct.pack(">QQ", msb, lsb)


def test_changelog_in_samzas_byte_layout_restores_to_the_same_values(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    counts_log, scores_log, views_log = (topic_name("counts"), topic_name("scores"),
                                         topic_name("views"))
    create_topic(kafka_bootstrap, source, 2)
    for topic in (counts_log, scores_log, views_log):
        create_topic(kafka_bootstrap, topic, 2, **{"cleanup.policy": "compact"})

    # What a Samza job with these serdes would have written to its changelogs.
    counts: dict[int, dict[int, int]] = {
        0: {-1: 5, 0: 0, 1: -(2**63), 2**31 - 1: 2**63 - 1, -(2**31): 42},
        1: {7: 1, -7: -1, 1000: 123456789012},
    }
    scores = {0: {uuid.UUID(int=(13 << 64) | 42): 9.156013e-002, uuid.uuid5(uuid.NAMESPACE_DNS,
              "samza.apache.org"): -2.5}, 1: {uuid.UUID(int=2**128 - 1): 1e300}}
    views = {0: {"alice": {"page": "/a", "n": 1}}, 1: {"bob": {"page": "/Zoë", "n": [1, 2]}}}
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, entries in counts.items():
        for key, value in entries.items():
            producer.produce(counts_log, key=samza_int(key), value=samza_long(value ^ 1),
                             partition=partition)  # an older value first ...
            producer.produce(counts_log, key=samza_int(key), value=samza_long(value),
                             partition=partition)  # ... then the current one
    producer.produce(counts_log, key=samza_int(99), value=samza_long(1), partition=0)
    producer.produce(counts_log, key=samza_int(99), value=None, partition=0)  # a tombstone
    for partition, entries in scores.items():
        for key, value in entries.items():
            producer.produce(scores_log, key=samza_uuid(key), value=samza_double(value),
                             partition=partition)
    for partition, entries in views.items():
        for key, value in entries.items():  # StringSerde keys, Jackson's compact UTF-8 JSON
            producer.produce(views_log, key=key.encode(), partition=partition,
                             value=json.dumps(value, separators=(",", ":"),
                                              ensure_ascii=False).encode())
    assert producer.flush(30) == 0

    conf = write_properties(tmp_path / "job.properties", {
        "job.name": name,
        "task.class": "tests.jobs.counting.Counter",
        "task.inputs": f"kafka.{source}",
        "task.processing.guarantee": "at-least-once",
        "systems.kafka.bootstrap.servers": kafka_bootstrap,
        "job.logged.store.base.dir": tmp_path / "state",
        "serializers.registry.int.class": SAMZA + "IntegerSerdeFactory",
        "serializers.registry.long.class": SAMZA + "LongSerdeFactory",
        "serializers.registry.uuid.class": SAMZA + "UUIDSerdeFactory",
        "serializers.registry.double.class": SAMZA + "DoubleSerdeFactory",
        "serializers.registry.string.class": SAMZA + "StringSerdeFactory",
        "serializers.registry.json.class": SAMZA + "JsonSerdeFactory",
        **store_props("counts", "int", "long", counts_log),
        **store_props("scores", "uuid", "double", scores_log),
        **store_props("views", "string", "json", views_log),
    })
    restored = millpond("restore", "--config", str(conf), "--full")
    assert restored.returncode == 0, restored.stdout + restored.stderr

    expected_counts = {k: v for entries in counts.values() for k, v in entries.items()}
    assert dump_store(conf, "counts") == expected_counts  # every value; 99 was deleted
    expected_scores = {repr(k): v for entries in scores.values() for k, v in entries.items()}
    assert dump_store(conf, "scores") == expected_scores
    expected_views = {k: v for entries in views.values() for k, v in entries.items()}
    assert dump_store(conf, "views") == expected_views


def store_props(store: str, key: str, msg: str, changelog: str) -> dict[str, str]:
    return {f"stores.{store}.factory": "org.apache.samza.storage.kv."
                                       "RocksDbKeyValueStorageEngineFactory",
            f"stores.{store}.key.serde": key, f"stores.{store}.msg.serde": msg,
            f"stores.{store}.changelog": f"kafka.{changelog}"}


# --- a real Samza config runs -----------------------------------------------------------------

HELLO_SAMZA = Path(__file__).parents[1] / "unit" / "data" / "samza"


def test_hello_samza_wikipedia_stats_config_runs_and_writes_samzas_bytes(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """hello-samza's wikipedia-stats.properties, as shipped (ZooKeeper key, ${basedir}, YARN
    and metrics keys, cache off) with the Python port of its task: the job runs and its
    changelog holds the all-time count in Samza's IntegerSerde bytes."""
    name, edits, stats = topic_name("job"), topic_name("edits"), topic_name("stats")
    changelog = topic_name("stats-changelog")
    create_topic(kafka_bootstrap, edits, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    titles = ["Samza", "Kafka", "Samza", "RocksDB", "Python"]
    for i, title in enumerate(titles):
        producer.produce(edits, value=json.dumps({"title": title, "diff-bytes": i}))
    assert producer.flush(30) == 0
    # the file names its brokers as systems.kafka.producer.bootstrap.servers=localhost:9092
    overrides = [f"job.name={name}", f"task.inputs=kafka.{edits}", f"stats.stream=kafka.{stats}",
                 f"systems.kafka.producer.bootstrap.servers={kafka_bootstrap}",
                 f"stores.wikipedia-stats.changelog=kafka.{changelog}",
                 f"job.logged.store.base.dir={tmp_path / 'state'}", "task.window.ms=100"]
    args = [a for o in overrides for a in ("--config-override", o)]
    conf = HELLO_SAMZA / "hello-samza-wikipedia-stats.properties"
    run = run_job(conf, "--bounded", *args)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ignoring systems.kafka.consumer.zookeeper.connect" in run.stderr
    assert "ignoring yarn.package.path" in run.stderr
    latest = latest_by_key(read_topic(kafka_bootstrap, changelog))
    assert latest == {b"count-edits-all-time": samza_int(len(titles))}
    dumped = millpond("store", "dump", "--config", str(conf), "--store", "wikipedia-stats", *args)
    assert [json.loads(line)["value"] for line in dumped.stdout.splitlines()] == [len(titles)]
    windows = [json.loads(m.value()) for m in read_topic(kafka_bootstrap, stats)]
    assert sum(w["edits"] for w in windows) == len(titles)
    assert windows[-1]["edits-all-time"] == len(titles)


# --- large messages -----------------------------------------------------------------------------

LIMIT = 1000


def sized_job(bootstrap: str, name: str, source: str, state: Path, policy: str) -> dict[str, Any]:
    return {
        "job.name": name,
        "task.class": "tests.jobs.samza_tasks.SizedValueTask",
        "task.inputs": f"kafka.{source}",
        "task.commit.ms": 60000,
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.samza.msg.serde": "json",
        "job.logged.store.base.dir": state,
        "stores.values.factory": "rocksdb",
        "stores.values.key.serde": "string",
        "stores.values.msg.serde": "string",
        "stores.values.changelog": f"kafka.{name}-values-changelog",
        "stores.values.changelog.max.message.size.bytes": LIMIT,
        f"stores.values.{policy}.large.messages": "true",
    }


def produce_sizes(bootstrap: str, topic: str, sizes: list[tuple[str, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for user, size in sizes:
        producer.produce(topic, value=json.dumps({"user": user, "size": size}), partition=0)
    assert producer.flush(30) == 0


def changelog_values(bootstrap: str, topic: str) -> tuple[list[Any], dict[bytes, bytes | None]]:
    records = read_topic(bootstrap, topic)
    return records, latest_by_key(records)


def test_drop_large_messages_keeps_them_out_of_changelog_and_store(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    create_topic(kafka_bootstrap, source, 1)
    conf = write_properties(tmp_path / "job.properties",
                            sized_job(kafka_bootstrap, name, source, tmp_path / "s", "drop"))
    produce_sizes(kafka_bootstrap, source, [("u1", 10), ("u3", LIMIT), ("u5", 7)])
    assert run_job(conf, "--bounded").returncode == 0  # committed: u1, u3, u5
    # u2 and u5 are written twice before the next write-down: the write-back cache
    # coalesces each key's puts, so the last one is what is written (or dropped).
    produce_sizes(kafka_bootstrap, source, [("u2", LIMIT + 1000), ("u1", LIMIT * 3),
                                            ("u4", 20), ("u2", 5), ("u5", 9), ("u5", LIMIT + 1),
                                            ("u6", LIMIT * 2)])
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr
    for user, size in (("u1", LIMIT * 3), ("u5", LIMIT + 1), ("u6", LIMIT * 2)):
        assert f"dropped the write of key '{user}': value of {size} bytes" in run.stderr
    records, latest = changelog_values(kafka_bootstrap, f"{name}-values-changelog")
    assert all(len(r.value() or b"") <= LIMIT for r in records), "no dropped value was sent"
    # u1 and u5 keep their committed values, u6 was never stored, u2's last write was small
    expected = {"u1": "x" * 10, "u2": "x" * 5, "u3": "x" * LIMIT, "u4": "x" * 20, "u5": "x" * 7}
    assert {k.decode(): v.decode() for k, v in latest.items() if v is not None} == expected
    assert dump_store(conf, "values") == expected  # the local store: the same, never a drop


def test_disallow_large_messages_stops_the_job_and_commits_nothing_after_the_last_commit(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    create_topic(kafka_bootstrap, source, 1)
    first = [("u1", 10), ("u2", 20), ("u3", LIMIT)]
    produce_sizes(kafka_bootstrap, source, first)
    conf = write_properties(tmp_path / "job.properties",
                            sized_job(kafka_bootstrap, name, source, tmp_path / "s", "disallow"))
    assert run_job(conf, "--bounded").returncode == 0
    changelog = f"{name}-values-changelog"
    committed_before = [(r.key(), r.value()) for r in read_topic(kafka_bootstrap, changelog)]
    produce_sizes(kafka_bootstrap, source, [("u1", 30), ("u9", LIMIT + 1), ("u4", 40)])
    run = run_job(conf, "--bounded")
    assert run.returncode == 1
    assert "Traceback" not in run.stderr, run.stderr
    error = [line for line in run.stderr.splitlines() if "disallow.large.messages" in line]
    assert error and "store 'values'" in error[-1] and "key 'u9'" in error[-1]
    assert f"{LIMIT + 1} bytes" in error[-1]
    shown = millpond("checkpoint", "show", "--config", str(conf), "--format", "json")
    assert json.loads(shown.stdout)["partition-0"]["inputs"][source] == len(first)
    committed_after = [(r.key(), r.value()) for r in read_topic(kafka_bootstrap, changelog)]
    assert committed_after == committed_before, "nothing after the last commit is committed"
    assert millpond("restore", "--config", str(conf)).returncode == 0
    assert dump_store(conf, "values") == {user: "x" * size for user, size in first}

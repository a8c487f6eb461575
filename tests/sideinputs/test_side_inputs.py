"""Side inputs against a real broker, with an enrichment job (tests/jobs/enrich.py): page
views joined with a profile table that the ``profiles`` store reads from a compacted topic.

Bootstrap (the first message already sees the whole table), restart (resumes at the
checkpointed side-input offsets: the log says how many records each task read), live
updates and tombstones, a lost or dirty local store (read again from the start, exact),
and the refusals (partition counts, writes by the task)."""

from __future__ import annotations

import ast
import json
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from millpond.changelog.checkpoint import Checkpoint, checkpoint_topic
from millpond.stores import RocksDbEngine
from tests.kafka_util import (
    OutputLines,
    create_topic,
    dump_store,
    hash_partition,
    read_topic,
    run_job,
    start_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 2
READ = re.compile(r"task partition-(\d+) side inputs ready: store profiles read (\d+) records "
                  r"from (\{[^}]*\}) to (\{[^}]*\})")
Table = dict[str, Any]


def produce_profiles(bootstrap: str, topic: str, changes: Table) -> None:
    """Write ``user -> profile`` records (None: a tombstone) to the side-input topic."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for user, profile in changes.items():
        producer.produce(topic, key=user.encode(), partition=hash_partition(user, PARTITIONS),
                         value=None if profile is None else json.dumps(profile).encode())
    assert producer.flush(30) == 0


def produce_views(bootstrap: str, topic: str, first: int, n: int, users: int = 50) -> list[str]:
    """``n`` views numbered from ``first``; the users viewing, in order."""
    producer = Producer({"bootstrap.servers": bootstrap})
    out = []
    for i in range(first, first + n):
        user = f"user-{(i * 7) % users}"
        producer.produce(topic, key=user.encode(), partition=hash_partition(user, PARTITIONS),
                         value=json.dumps({"user_id": user, "i": i}).encode())
        out.append(user)
    assert producer.flush(30) == 0
    return out


def profiles(users: range, version: int) -> Table:
    return {f"user-{u}": {"name": f"user {u}", "zip": f"{version}{u:04d}"} for u in users}


def job(bootstrap: str, name: str, views: str, side: str, out: str, state: Path,
        guarantee: str, **extra: Any) -> dict[str, Any]:
    return {
        "job.name": name,
        "task.class": "tests.jobs.enrich.ProfileEnricher",
        "task.inputs": f"kafka.{views}",
        "task.commit.ms": 300,
        "task.processing.guarantee": guarantee,
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "stores.profiles.factory": "rocksdb",
        "stores.profiles.key.serde": "string",
        "stores.profiles.msg.serde": "json",
        "stores.profiles.side.inputs": f"kafka.{side}",
        "stores.profiles.side.inputs.processor.factory": "millpond.sideinputs.KeyValueProcessor",
        "enriched.stream": f"kafka.{out}",
        "job.logged.store.base.dir": str(state),
        "systems.kafka.consumer.group.instance.id": f"{name}-process-1",
        "systems.kafka.consumer.session.timeout.ms": 10000,
        **extra,
    }


def topics(bootstrap: str, topic_name: Callable[[str], str]) -> tuple[str, str, str]:
    views, side, out = topic_name("views"), topic_name("profiles"), topic_name("out")
    create_topic(bootstrap, views, PARTITIONS)
    create_topic(bootstrap, side, PARTITIONS, **{"cleanup.policy": "compact"})
    return views, side, out


def enriched(bootstrap: str, out: str) -> dict[int, Any]:
    """View number -> the profile the job joined it with (each view once per run)."""
    return {json.loads(m.value())["i"]: json.loads(m.value())["profile"]
            for m in read_topic(bootstrap, out)}


def side_reads(log: str) -> dict[int, tuple[int, dict[str, int], dict[str, int]]]:
    """partition -> (records read, from offsets, to offsets) of its bootstrap, per the log."""
    return {int(m[1]): (int(m[2]), ast.literal_eval(m[3]), ast.literal_eval(m[4]))
            for m in READ.finditer(log)}


def side_ends(bootstrap: str, topic: str) -> dict[int, int]:
    return {p: Consumer({"bootstrap.servers": bootstrap, "group.id": "w"})
            .get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)}


def checkpointed_side_offsets(bootstrap: str, name: str) -> dict[int, dict[str, dict[str, int]]]:
    out = {}
    for msg in read_topic(bootstrap, checkpoint_topic(name, "1")):
        ckpt = Checkpoint.from_bytes(msg.value())
        out[ckpt.partition] = ckpt.side_inputs
    return out


def expect_views(first: int, users: list[str], table: Table) -> dict[int, Any]:
    return {first + k: table.get(u) for k, u in enumerate(users)}


def run_ok(config: Path) -> str:
    done = run_job(config, "--bounded", timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_bootstrap_restart_resumes_and_tombstones_delete(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Effectively-once; the side input is also listed in task.inputs, as Samza's low-level
    jobs do (it fills the store and never reaches process())."""
    views, side, out = topics(kafka_bootstrap, topic_name)
    name = topic_name("job")
    table = profiles(range(40), 1)  # users 40-49 have no profile
    produce_profiles(kafka_bootstrap, side, table)
    users = produce_views(kafka_bootstrap, views, 0, 60)
    config = write_properties(tmp_path / "job.properties", job(
        kafka_bootstrap, name, views, side, out, tmp_path / "state", "effectively-once",
        **{"task.inputs": f"kafka.{views},kafka.{side}"}))

    log = run_ok(config)
    # Bootstrap: the whole table was there at init(), so every view saw it.
    assert enriched(kafka_bootstrap, out) == expect_views(0, users, table)
    per_partition = Counter(hash_partition(u, PARTITIONS) for u in table)
    assert {(m.partition(), json.loads(m.value())["size_at_init"])
            for m in read_topic(kafka_bootstrap, out)} == set(per_partition.items())
    ends = side_ends(kafka_bootstrap, side)
    reads = side_reads(log)
    assert {p: r[0] for p, r in reads.items()} == ends  # each record read once
    assert checkpointed_side_offsets(kafka_bootstrap, name) == {
        p: {"profiles": {side: ends[p]}} for p in range(PARTITIONS)}

    changes: Table = {**profiles(range(5), 2), **dict.fromkeys(
        (f"user-{u}" for u in range(5, 10)), None), **profiles(range(45, 46), 2)}
    produce_profiles(kafka_bootstrap, side, changes)
    table2 = {u: p for u, p in {**table, **changes}.items() if p is not None}
    users2 = produce_views(kafka_bootstrap, views, 60, 60)

    log = run_ok(config)
    joined = enriched(kafka_bootstrap, out)
    assert {i: p for i, p in joined.items() if i >= 60} == expect_views(60, users2, table2)
    # Restart: each task resumed at its checkpointed side-input offsets and read only the
    # 11 changes, not the 51 records the topic now holds.
    reads = side_reads(log)
    assert {p: r[1] for p, r in reads.items()} == {p: {side: ends[p]} for p in range(PARTITIONS)}
    new_ends = side_ends(kafka_bootstrap, side)
    assert sum(r[0] for r in reads.values()) == len(changes) == sum(new_ends.values()) - sum(
        ends.values())
    assert "reading its side inputs again" not in log
    assert dump_store(config, "profiles") == table2  # tombstones removed their keys


def views_until_seen(bootstrap: str, views: str, out: str, change: Table,
                     timeout: float = 30) -> dict[str, list[Any]]:
    """Produce views of the changed users until the job's output shows every change;
    per user, the profiles its views were joined with, in order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watch",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(out, p, 0) for p in range(PARTITIONS)])
    producer = Producer({"bootstrap.servers": bootstrap})
    seen: dict[str, list[Any]] = {user: [] for user in change}
    deadline = time.monotonic() + timeout
    i = 1_000_000
    try:
        while not all(p in seen[u] for u, p in change.items()):
            assert time.monotonic() < deadline, f"changes not seen: {seen}"
            for user in change:
                producer.produce(views, key=user.encode(),
                                 partition=hash_partition(user, PARTITIONS),
                                 value=json.dumps({"user_id": user, "i": i}).encode())
                i += 1
            producer.flush(10)
            for msg in consumer.consume(100, 0.3):
                error = msg.error()
                if error is None:
                    doc = json.loads(msg.value())  # type: ignore[arg-type]
                    if doc["user_id"] in seen:
                        seen[doc["user_id"]].append(doc["profile"])
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(error)
    finally:
        consumer.close()
    return seen


def assert_switched_once(seen: dict[str, list[Any]], before: Table, change: Table) -> None:
    """Per user, views are processed in order: the old profile, then the new one for good."""
    for user, profile in change.items():
        first = seen[user].index(profile)
        assert all(p == before.get(user) for p in seen[user][:first]), seen[user]
        assert all(p == profile for p in seen[user][first:]), seen[user]


def test_live_updates_reach_later_messages(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """At-least-once; changes produced while the job runs are applied between messages."""
    views, side, out = topics(kafka_bootstrap, topic_name)
    name = topic_name("job")
    table = profiles(range(20), 1)
    produce_profiles(kafka_bootstrap, side, table)
    config = write_properties(tmp_path / "job.properties", job(
        kafka_bootstrap, name, views, side, out, tmp_path / "state", "at-least-once"))
    proc = start_job(config)
    lines = OutputLines(proc)
    change: Table = {"user-3": {"name": "user 3", "zip": "99999"}, "user-4": None}
    try:
        lines.wait_for("both tasks ready", lambda ls: sum(" ready: restored" in x for x in ls)
                       == PARTITIONS)
        produce_profiles(kafka_bootstrap, side, change)
        assert_switched_once(views_until_seen(kafka_bootstrap, views, out, change), table,
                             change)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, lines.text()
    expected = {**table, "user-3": change["user-3"]}
    del expected["user-4"]
    assert dump_store(config, "profiles") == expected


def test_side_input_partitions_follow_their_tasks(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Effectively-once; a second process takes one task: it reads that task's side-input
    partition (and only it) into its own empty store, and both processes follow theirs."""
    views, side, out = topics(kafka_bootstrap, topic_name)
    name = topic_name("job")
    table = profiles(range(20), 1)
    produce_profiles(kafka_bootstrap, side, table)
    base = job(kafka_bootstrap, name, views, side, out, tmp_path / "a", "effectively-once",
               **{"systems.kafka.consumer.heartbeat.interval.ms": 1000})
    del base["systems.kafka.consumer.group.instance.id"]  # dynamic: B joins, A hands over
    a_conf = write_properties(tmp_path / "a.properties", base)
    b_conf = write_properties(tmp_path / "b.properties", {
        **base, "job.logged.store.base.dir": str(tmp_path / "b")})
    a = start_job(a_conf)
    a_out = OutputLines(a)
    b = None
    try:
        a_out.wait_for("A's tasks ready", lambda ls: sum(" ready: restored" in x for x in ls)
                       == PARTITIONS)
        b = start_job(b_conf)
        b_out = OutputLines(b)
        lines = b_out.wait_for("B's task ready", lambda ls: " ready: restored" in "".join(ls))
        (moved,) = side_reads("".join(lines))
        ends = side_ends(kafka_bootstrap, side)
        assert side_reads("".join(lines))[moved] == (ends[moved], {side: 0}, {side: ends[moved]})
        change: Table = {"user-3": {"name": "user 3", "zip": "99999"}, "user-4": None}
        assert {hash_partition(u, PARTITIONS) for u in change} == {0, 1}  # one per process
        produce_profiles(kafka_bootstrap, side, change)
        assert_switched_once(views_until_seen(kafka_bootstrap, views, out, change), table,
                             change)
    finally:
        for proc in (b, a):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
        assert a.wait(30) == 0, a_out.text()
        assert b is None or b.wait(30) == 0, b_out.text()


def test_lost_or_dirty_local_store_is_read_again_exactly(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Exactly-once; one task's store directory deleted, the other's holding a write no
    checkpoint describes (its SIDE_INPUTS file gone, as after a crash mid-interval)."""
    views, side, out = topics(kafka_bootstrap, topic_name)
    name = topic_name("job")
    table = profiles(range(30), 1)
    produce_profiles(kafka_bootstrap, side, table)
    produce_views(kafka_bootstrap, views, 0, 40)
    state = tmp_path / "state"
    config = write_properties(tmp_path / "job.properties", job(
        kafka_bootstrap, name, views, side, out, state, "exactly-once"))
    run_ok(config)

    import shutil
    shutil.rmtree(state / name / "profiles" / "partition-0")
    dirty = state / name / "profiles" / "partition-1"
    (dirty / "SIDE_INPUTS").unlink()
    engine = RocksDbEngine(dirty)
    engine.put(b"user-999", b'{"name": "not from the side inputs"}')
    engine.close()
    changes: Table = {"user-1": None, "user-2": {"name": "user 2", "zip": "77777"}}
    produce_profiles(kafka_bootstrap, side, changes)
    table2 = {u: p for u, p in {**table, **changes}.items() if p is not None}
    users2 = produce_views(kafka_bootstrap, views, 40, 40)

    log = run_ok(config)
    assert log.count("reading its side inputs again from the start") == PARTITIONS, log
    reads = side_reads(log)
    assert {p: (r[0], r[1]) for p, r in reads.items()} == {
        p: (n, {side: 0}) for p, n in side_ends(kafka_bootstrap, side).items()}
    joined = enriched(kafka_bootstrap, out)
    assert {i: p for i, p in joined.items() if i >= 40} == expect_views(40, users2, table2)
    assert dump_store(config, "profiles") == table2


def test_refusals_name_the_problem(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """A side input with another partition count, and a task writing to its side-input
    store, stop the job with a message saying what and where."""
    views, side, out = topics(kafka_bootstrap, topic_name)
    wide = topic_name("wide")
    create_topic(kafka_bootstrap, wide, 3)
    config = write_properties(tmp_path / "wide.properties", job(
        kafka_bootstrap, topic_name("job"), views, wide, out, tmp_path / "s1", "effectively-once"))
    done = run_job(config, "--bounded", timeout=60)
    assert done.returncode == 2  # a config error
    assert "Traceback" not in done.stderr, done.stderr
    assert (f"wide.properties:12: stores.profiles.side.inputs: side-input topic {wide} has 3 "
            "partitions, the job has 2 tasks") in done.stderr, done.stderr

    produce_profiles(kafka_bootstrap, side, profiles(range(3), 1))
    produce_views(kafka_bootstrap, views, 0, 3)
    config = write_properties(tmp_path / "write.properties", job(
        kafka_bootstrap, topic_name("job"), views, side, out, tmp_path / "s2",
        "effectively-once", **{"try.write": "true"}))
    done = run_job(config, "--bounded", timeout=60)
    assert done.returncode == 1  # raised in process(): the record stops the job
    assert "store 'profiles' is filled from its side inputs" in done.stderr, done.stderr


def test_sigkill_mid_interval_restarts_exact(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """At-least-once; the job is SIGKILLed right after it applied side-input changes (its
    store then holds writes after the last commit, or the commit just made); the restart
    resumes or reads again, and the store and the joins are exact either way."""
    views, side, out = topics(kafka_bootstrap, topic_name)
    name = topic_name("job")
    table = profiles(range(20), 1)
    produce_profiles(kafka_bootstrap, side, table)
    config = write_properties(tmp_path / "job.properties", job(
        kafka_bootstrap, name, views, side, out, tmp_path / "state", "at-least-once"))
    proc = start_job(config)
    lines = OutputLines(proc)
    try:
        lines.wait_for("both tasks ready", lambda ls: sum(" ready: restored" in x for x in ls)
                       == PARTITIONS)
        first: Table = {"user-5": {"name": "user 5", "zip": "55555"},
                        "user-6": {"name": "user 6", "zip": "66666"}}
        produce_profiles(kafka_bootstrap, side, first)
        views_until_seen(kafka_bootstrap, views, out, first)
        second: Table = {"user-7": None, "user-8": None, "user-5": {"name": "five"}}
        produce_profiles(kafka_bootstrap, side, second)
        time.sleep(0.2)  # applied by the next poll, committed or not
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    final = {u: p for u, p in {**table, **first, **second}.items() if p is not None}
    users = produce_views(kafka_bootstrap, views, 0, 40, users=20)
    log = run_ok(config)
    joined = enriched(kafka_bootstrap, out)
    assert {i: p for i, p in joined.items() if i < 40} == expect_views(0, users, final), log
    assert dump_store(config, "profiles") == final

"""``millpond spark rescale`` on a real broker with real Spark: a job grows from 4 to 8 tasks.

Acceptance (issue 17): run the count job on 4 partitions until drained, add partitions to
the input (8), rescale, produce more input with the Java client's default partitioner, run
again with a SIGKILL in the middle and a bounded rerun: every key's final value equals the
reference, and every key lives only in the partition the partitioner gives it (in the new
changelog generation and in the local stores). Plus the refusals: a running job, inputs
not grown, a shrink, undrained input.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from millpond.changelog.checkpoint import checkpoint_topic
from millpond.config import Config
from millpond.partitioner import partition_of
from tests.kafka_util import (
    OutputLines,
    counting_job,
    create_topic,
    millpond,
    read_stable,
    ready_lines,
    run_job,
    start_job,
    write_properties,
)
from tests.spark.test_bootstrap import _inputs_committed, _produce_views

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _job(kafka_bootstrap: str, topic_name: Callable[[str], str], root: Path, partitions: int,
         **extra: Any) -> tuple[Path, str, str]:
    """A count job without static membership: a stopped process leaves the group at once,
    so the rescale that follows sees an empty group."""
    source, job = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, partitions)
    props = counting_job(kafka_bootstrap, job, source, root / "state", **extra)
    del props["systems.kafka.consumer.group.instance.id"]
    return write_properties(root / "job.properties", props), source, job


def _grow(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) != partitions:
        assert time.monotonic() < deadline, f"{topic} did not grow to {partitions}"
        time.sleep(0.2)


def _partition_count(bootstrap: str, topic: str) -> int | None:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics.get(topic)
    return None if md is None else len(md.partitions)


def _local_state(conf: Path) -> list[tuple[int, str, int]]:
    """(partition, key, value) of every entry of the local stores (millpond store dump)."""
    out = millpond("store", "dump", "--config", str(conf), "--store", "counts")
    assert out.returncode == 0, out.stdout + out.stderr
    return [(row["partition"], row["key"], row["value"])
            for row in map(json.loads, out.stdout.splitlines())]


def _changelog_state(bootstrap: str, topic: str) -> dict[tuple[int, str], int]:
    """The live (partition, key) -> value of a changelog, read to its stable end."""
    latest: dict[tuple[int, str], int | None] = {}
    for msg in sorted(read_stable(bootstrap, topic), key=lambda m: (m.partition(), m.offset())):
        value = msg.value()
        latest[(msg.partition(), msg.key().decode())] = (None if value is None
                                                         else json.loads(value))
    return {k: v for k, v in latest.items() if v is not None}


def _misplaced(keys: list[tuple[int, str]], partitions: int) -> list[tuple[int, str, int]]:
    """Keys outside the partition the Java default partitioner gives them."""
    return [(p, k, want) for p, k in keys
            if p != (want := partition_of(k.encode(), partitions, "murmur2"))]


def test_rescale_4_to_8_then_run_with_a_sigkill(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    from millpond.spark.rescale import rescale

    conf, source, job = _job(kafka_bootstrap, topic_name, tmp_path, 4, **{
        "task.class": "tests.jobs.counting.SlowCounter",
        "task.processing.guarantee": "exactly-once", "task.commit.ms": 300})
    old_topic = f"{job}-counts-changelog"
    expected = _produce_views(kafka_bootstrap, source, 4000, 400, 3)
    first = run_job(conf, "--bounded", timeout=120)  # drained: stops at the inputs' ends
    assert first.returncode == 0, first.stderr[-3000:]

    _grow(kafka_bootstrap, source, 8)
    started = time.monotonic()
    result = rescale(Config.load(conf), 8, spark=spark)
    took = time.monotonic() - started
    doc = result.to_dict()
    moved = doc["stores"]["counts"]
    assert (doc["partitions_before"], doc["partitions_after"]) == (4, 8)
    assert moved["old_topic"] == old_topic and moved["topic"] == f"{old_topic}-gen2"
    assert moved["keys"] == len(expected) == sum(moved["partitions"].values())
    # The new generation: 8 partitions, every key once, in its partitioner's partition.
    assert _partition_count(kafka_bootstrap, moved["topic"]) == 8
    assert _partition_count(kafka_bootstrap, checkpoint_topic(job, "1")) == 8
    gen2 = _changelog_state(kafka_bootstrap, moved["topic"])
    assert not _misplaced(list(gen2), 8)
    assert {k: v for (_, k), v in gen2.items()} == dict(expected) and len(gen2) == len(expected)
    # The old generation is kept, untouched.
    assert _partition_count(kafka_bootstrap, old_topic) == 4

    # New input, placed by the Java default partitioner over 8 partitions; 1/5 new users.
    more = _produce_views(kafka_bootstrap, source, 6000, 500, 4)
    expected.update(more)
    committed_before = _inputs_committed(kafka_bootstrap, job, source)
    proc = start_job(conf, "--bounded", env={"MILLPOND_TEST_DELAY": "0.001"})
    out = OutputLines(proc)
    try:
        out.wait_for("every task ready", lambda ls: len(ready_lines("".join(ls))) >= 8,
                     timeout=120)
        deadline = time.monotonic() + 120
        while _inputs_committed(kafka_bootstrap, job, source) <= committed_before:
            assert proc.poll() is None, out.text()[-3000:]
            assert time.monotonic() < deadline, "no commit within 120 s"
            time.sleep(0.2)
        time.sleep(0.5)
        assert proc.poll() is None, "the job finished before the kill: give it more input"
    finally:
        proc.kill()  # SIGKILL, mid-run
        proc.wait(30)
    ready = ready_lines(out.text())[:8]
    # Each task restored exactly its keys from the new generation; old partitions resume
    # at their ends, new ones at 0.
    assert sorted(t for t, _, _ in ready) == [f"partition-{p}" for p in range(8)], ready
    restored = {t: n for t, n, _ in ready}
    assert restored == {f"partition-{p}": moved["partitions"].get(str(p), 0)
                        for p in range(8)}, ready
    killed_at = _inputs_committed(kafka_bootstrap, job, source)
    assert committed_before < killed_at < sum(expected.values()), (killed_at, committed_before)

    final = run_job(conf, "--bounded", timeout=180)
    assert final.returncode == 0, final.stderr[-3000:]
    local = _local_state(conf)
    assert not _misplaced([(p, k) for p, k, _ in local], 8)
    assert len(local) == len({k for _, k, _ in local})  # each key in one store only
    state = {k: v for _, k, v in local}
    wrong = {u: (state.get(u), n) for u, n in expected.items() if state.get(u) != n}
    assert not wrong and len(state) == len(expected), (len(wrong), list(wrong.items())[:5])
    latest = _changelog_state(kafka_bootstrap, moved["topic"])
    assert not _misplaced(list(latest), 8)
    assert {k: v for (_, k), v in latest.items()} == dict(expected)
    print(f"rescale 4->8 of {moved['keys']} keys: {took:.1f}s; killed after {killed_at} "
          f"of {sum(expected.values())} inputs committed")


def test_refusals_running_not_grown_shrink_undrained(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Every refusal comes before Spark starts and leaves nothing behind."""
    from millpond.spark.errors import RescaleError
    from millpond.spark.rescale import rescale

    conf, source, job = _job(kafka_bootstrap, topic_name, tmp_path, 2)
    args = ["spark", "rescale", "--config", str(conf), "--partitions", "4"]
    _produce_views(kafka_bootstrap, source, 300, 30, 1)
    # Drained first, so the count below is only the late records (a job stopped soon after
    # it is ready may not have committed anything yet under load).
    assert run_job(conf, "--bounded", timeout=120).returncode == 0
    proc = start_job(conf)
    out = OutputLines(proc)
    try:
        out.wait_for("tasks ready", lambda ls: len(ready_lines("".join(ls))) >= 2, timeout=60)
        running = millpond(*args, timeout=120)
    finally:
        proc.terminate()
        proc.wait(30)
    assert running.returncode == 2, running.stdout + running.stderr
    assert "live members" in running.stderr and f"{job}-1" in running.stderr

    config = Config.load(conf)
    with pytest.raises(RescaleError, match=rf"every input must have 4 partitions first .*"
                       rf"{source}=2"):
        rescale(config, 4)
    with pytest.raises(RescaleError, match="already has 2 tasks; rescale only grows"):
        rescale(config, 2)

    _grow(kafka_bootstrap, source, 4)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(7):  # after the job stopped: its checkpoint is behind the end
        producer.produce(source, key=b"late", value=json.dumps({"user_id": "late", "i": i}),
                         partition=1)
    assert producer.flush(30) == 0
    undrained = millpond(*args, timeout=120)
    assert undrained.returncode == 2, undrained.stdout + undrained.stderr
    assert f"job {job} is not drained: 7 input record(s)" in undrained.stderr
    assert f"{source}[1]: checkpoint at" in undrained.stderr and "7 unprocessed" in undrained.stderr
    # Nothing written: no new generation, the checkpoint topic as it was.
    assert _partition_count(kafka_bootstrap, f"{job}-counts-changelog-gen2") is None
    assert _partition_count(kafka_bootstrap, checkpoint_topic(job, "1")) == 2


def _hourly_reference(bootstrap: str, topic: str) -> Counter[str]:
    """What HourlyCounter holds after consuming all of ``topic``: count per hour|user."""
    expected: Counter[str] = Counter()
    for msg in read_stable(bootstrap, topic):
        doc = json.loads(msg.value())
        expected[f"{doc['i'] % 3}|{doc['user_id']}"] += 1
    return expected


def test_key_fn_moves_a_store_keyed_hour_user_through_the_command_line(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    from tests.spark.test_cli import SPARK_ARGS, SPARK_TIMEOUT

    conf, source, job = _job(kafka_bootstrap, topic_name, tmp_path, 2,
                             **{"task.class": "tests.jobs.hourly.HourlyCounter"})
    _produce_views(kafka_bootstrap, source, 1500, 200, 8)
    assert run_job(conf, "--bounded", timeout=120).returncode == 0
    _grow(kafka_bootstrap, source, 4)
    report = tmp_path / "rescale.json"
    done = millpond("spark", "rescale", "--config", str(conf), "--partitions", "4",
                    "--key-fn", "tests.jobs.hourly:user_of", "--report", str(report),
                    *SPARK_ARGS, timeout=SPARK_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc == json.loads(report.read_text()) and doc["key_fn"] == "tests.jobs.hourly:user_of"
    expected = _hourly_reference(kafka_bootstrap, source)
    gen2 = _changelog_state(kafka_bootstrap, doc["stores"]["counts"]["topic"])
    # Placed by the user part: where the producers put that user's input.
    assert not _misplaced([(p, k.split("|", 1)[1]) for p, k in gen2], 4)
    assert {k: v for (_, k), v in gen2.items()} == dict(expected)

    _produce_views(kafka_bootstrap, source, 1500, 250, 9)
    assert run_job(conf, "--bounded", timeout=120).returncode == 0
    local = _local_state(conf)
    assert not _misplaced([(p, k.split("|", 1)[1]) for p, k, _ in local], 4)
    assert {k: v for _, k, v in local} == dict(_hourly_reference(kafka_bootstrap, source))


def test_refuses_a_key_that_two_old_partitions_hold(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """A per-task aggregate (the same key in every partition) cannot be moved: one of its
    values would be dropped. Refused before anything is written."""
    from millpond.spark.errors import RescaleError
    from millpond.spark.rescale import rescale

    conf, source, job = _job(kafka_bootstrap, topic_name, tmp_path, 2, **{
        "task.class": "tests.jobs.hourly.HourlyCounter", "hourly.totals": "true"})
    _produce_views(kafka_bootstrap, source, 300, 50, 10)
    assert run_job(conf, "--bounded", timeout=120).returncode == 0
    _grow(kafka_bootstrap, source, 4)
    with pytest.raises(RescaleError, match=r"store 'counts': 1 key\(s\) live in more than one "
                       r"old partition \(e.g. b'all\|total' in partitions \[0, 1\]\)"):
        rescale(Config.load(conf), 4, "tests.jobs.hourly:user_of", spark=spark)
    assert _partition_count(kafka_bootstrap, checkpoint_topic(job, "1")) == 2
    topic = f"{job}-counts-changelog-gen2"
    assert not read_stable(kafka_bootstrap, topic)  # created, but nothing written to it



def test_a_partial_generation_is_refused_until_deleted(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """A run that failed before its checkpoints leaves a partial new generation, which the
    next run refuses (docs/operations/spark.md): with ``<changelog>-gen2`` already holding a
    record, rescale exits 2 naming it and changes nothing (the checkpoint topic keeps its
    partitions, the record stays the only one); once the topic is deleted, it runs."""
    from millpond.spark.rescale import rescale

    conf, source, job = _job(kafka_bootstrap, topic_name, tmp_path, 2)
    _produce_views(kafka_bootstrap, source, 200, 20, 5)
    assert run_job(conf, "--bounded", timeout=120).returncode == 0
    _grow(kafka_bootstrap, source, 4)
    partial = f"{job}-counts-changelog-gen2"
    create_topic(kafka_bootstrap, partial, 4, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(partial, key=b"user-1", value=b"99", partition=0)
    assert producer.flush(30) == 0

    refused = millpond("spark", "rescale", "--config", str(conf), "--partitions", "4",
                       timeout=300)
    assert refused.returncode == 2, refused.stdout + refused.stderr[-3000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: changelog generation {partial} of store 'counts' exists and holds records "
        "(an earlier rescale that failed before its checkpoints?); delete it and run rescale "
        "again"), refused.stderr[-3000:]
    assert _partition_count(kafka_bootstrap, checkpoint_topic(job, "1")) == 2
    assert [(m.key(), m.value()) for m in read_stable(kafka_bootstrap, partial)] == [
        (b"user-1", b"99")]

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([partial])[partial].result(timeout=30)
    deadline = time.monotonic() + 30
    while _partition_count(kafka_bootstrap, partial) is not None:
        assert time.monotonic() < deadline, f"{partial} was not deleted"
        time.sleep(0.2)
    rescale(Config.load(conf), 4, spark=spark)
    assert _partition_count(kafka_bootstrap, checkpoint_topic(job, "1")) == 4
    assert sum(_changelog_state(kafka_bootstrap, partial).values()) == 200


SIDE_STORE = {
    "stores.profiles.factory": "rocksdb",
    "stores.profiles.key.serde": "string",
    "stores.profiles.msg.serde": "json",
    "stores.profiles.side.inputs.processor.factory": "millpond.sideinputs.KeyValueProcessor",
}


def test_side_input_stores_are_left_alone_and_changelog_less_ones_refused(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """What rescale does with the stores it cannot move (docs/operations/spark.md): a
    side-input store is left alone (reported as skipped, no new generation; each task refills
    it from its side input, grown to M partitions too) while the changelogged store moves;
    a RocksDB store without a changelog is refused before anything is written, naming it (an
    in-memory one holds nothing across restarts and is passed over)."""
    from millpond.spark.errors import RescaleError
    from millpond.spark.rescale import rescale

    side = topic_name("side")
    create_topic(kafka_bootstrap, side, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for p in (0, 1):
        producer.produce(side, key=f"user-{p}".encode(), value=b'{"plan": "pro"}', partition=p)
    assert producer.flush(30) == 0
    conf, source, job = _job(kafka_bootstrap, topic_name, tmp_path, 2, **{
        **SIDE_STORE, "stores.profiles.side.inputs": f"kafka.{side}",
        "stores.scratch.factory": "inmemory", "stores.scratch.key.serde": "string",
        "stores.scratch.msg.serde": "json"})
    _produce_views(kafka_bootstrap, source, 200, 20, 6)
    first = run_job(conf, "--bounded", timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    _grow(kafka_bootstrap, source, 4)
    _grow(kafka_bootstrap, side, 4)

    # a RocksDB store without a changelog: refused, nothing written
    local_only = write_properties(tmp_path / "local-only.properties", {
        **dict(line.split("=", 1) for line in conf.read_text().splitlines()),
        "stores.local.factory": "rocksdb", "stores.local.key.serde": "string",
        "stores.local.msg.serde": "json"})
    with pytest.raises(RescaleError, match="store 'local' has no changelog: its state lives "
                       "only in local directories and cannot be moved to new partitions"):
        rescale(Config.load(local_only), 4, spark=spark)
    assert _partition_count(kafka_bootstrap, checkpoint_topic(job, "1")) == 2
    assert _partition_count(kafka_bootstrap, f"{job}-counts-changelog-gen2") is None

    # the side-input and in-memory stores left alone, the counts moved
    result = rescale(Config.load(conf), 4, spark=spark)
    assert result.skipped == ["profiles"] and set(result.stores) == {"counts"}, result
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).topics
    assert not [t for t in topics if job in t and ("profiles" in t or "scratch" in t)], topics
    assert sum(_changelog_state(kafka_bootstrap, f"{job}-counts-changelog-gen2").values()) == 200

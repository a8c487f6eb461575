"""The container against a real broker: scale-out, bad input, topic checks, restore."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    OutputLines,
    assigned_partitions,
    checkpoint_records,
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    read_topic,
    run_job,
    start_job,
    task_summaries,
    write_properties,
)

pytestmark = pytest.mark.kafka

READY = " ready: restored"  # a task's "ready" log line


def test_two_processes_scale_out_and_back(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A second process joins, both process and commit their own tasks side by side, then
    the second is SIGTERMed and hands its tasks back; counts stay exact."""
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 4)
    expected = produce_users(kafka_bootstrap, source, 8000, 200, 4)
    name = topic_name("job")
    base = counting_job(kafka_bootstrap, name, source, tmp_path / "a", **{
        "task.class": "tests.jobs.counting.SlowCounter",
        "systems.kafka.consumer.heartbeat.interval.ms": 1000})  # quicker rebalances
    # Dynamic membership: a static member (group.instance.id) does not leave the group on
    # shutdown, so its partitions would only move after session.timeout.ms.
    del base["systems.kafka.consumer.group.instance.id"]
    a_conf = write_properties(tmp_path / "a.properties", base)
    b_conf = write_properties(tmp_path / "b.properties", {
        **base, "job.logged.store.base.dir": str(tmp_path / "b")})
    slow = {"MILLPOND_TEST_DELAY": "0.001"}  # >= 8 s of work for one process
    a = start_job(a_conf, "--bounded", env=slow)
    a_out = OutputLines(a)
    b = None
    try:
        a_out.wait_for("A's first task ready", lambda ls: any(READY in x for x in ls))
        b = start_job(b_conf, env=slow)
        b_out = OutputLines(b)
        b_parts = set().union(*assigned_partitions(b_out.wait_for(
            "B assigned partitions", lambda ls: any(assigned_partitions(ls)))))
        b_out.wait_for("B's tasks ready",
                       lambda ls: sum(READY in x for x in ls) == len(b_parts))
        both_up = time.time()
        a_parts = {0, 1, 2, 3} - b_parts
        assert a_parts and b_parts, b_parts
        # Side by side: once both processes' tasks are ready, every task commits, and in
        # each process some task commits at two different positions, so it processed
        # input in between.
        deadline = time.monotonic() + 60
        while True:
            moved = _committed_since(kafka_bootstrap, name, source, both_up)
            if all(moved.get(p) for p in range(4)) and all(
                    any(len(set(moved.get(p, []))) >= 2 for p in parts)
                    for parts in (a_parts, b_parts)):
                break
            assert time.monotonic() < deadline, f"not both at work: {moved}"
            time.sleep(0.3)
        assert a.poll() is None and b.poll() is None, "both still running"
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=60) == 0, b_out.text()[-3000:]
        assert a.wait(timeout=120) == 0, a_out.text()[-3000:]
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    a_log, b_log = a_out.text(), b_out.text()
    # B only ever had its share (committed periodically and at the end), and gave it back.
    b_summary = task_summaries(b_log)
    assert set(b_summary) == b_parts, b_log[-3000:]
    # Every task B held committed; B processed input, though not necessarily in every task:
    # A may drain a partition before the rebalance hands it over (librdkafka fetches
    # partitions unevenly), leaving B nothing to do there.
    assert all(commits >= 2 for _, commits in b_summary.values()), b_summary
    assert sum(done for done, _ in b_summary.values()) > 0, b_summary
    assert [s for s in assigned_partitions(b_log.splitlines()) if s] == [b_parts]
    assert f"revoking partitions {sorted(b_parts)}" in b_log
    # A: all four, gave B's share away, got it back, ended with all four.
    assert [s for s in assigned_partitions(a_log.splitlines()) if s] == [
        {0, 1, 2, 3}, b_parts], a_log[-3000:]
    assert set(task_summaries(a_log)) == {0, 1, 2, 3}
    # The partitions came back to A, which restored the tail B wrote; its stores hold it all.
    assert dump_store(a_conf, "counts") == dict(expected), a_log[-3000:]


def _committed_since(bootstrap: str, job: str, source: str, since: float) -> dict[int, list[int]]:
    """The committed next input offsets of each task's checkpoints written after unix time
    ``since``, in order."""
    return {p: [inputs[source] for at, inputs in records if at > since]
            for p, records in checkpoint_records(bootstrap, job).items()}


def _poison_input(bootstrap: str, topic: str) -> tuple[Counter[str], int]:
    """Good messages, one malformed JSON message in partition 0, then more good ones."""
    create_topic(bootstrap, topic, 1)
    expected = produce_users(bootstrap, topic, 300, 10, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"user-1", value=b"{not json", partition=0)
    producer.flush(30)
    poison_offset = 300
    expected += produce_users(bootstrap, topic, 200, 10, 1)
    return expected, poison_offset


def test_poison_message_stops_the_job_naming_where(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source = topic_name("in")
    _, offset = _poison_input(kafka_bootstrap, source)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "s"))
    run = run_job(conf, "--bounded")
    assert run.returncode == 1  # a poison record: a runtime failure
    assert f"{source}[0] at offset {offset}" in run.stderr, run.stderr[-2000:]
    assert "JSON" in run.stderr or "json" in run.stderr
    shown = millpond("checkpoint", "show", "--config", str(conf), "--format", "json")
    ckpt = json.loads(shown.stdout)["partition-0"]
    assert ckpt["inputs"][source] == offset, "everything before the poison message is committed"
    state = dump_store(conf, "counts")
    assert sum(state.values()) == offset


def test_poison_message_dropped_when_configured(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source = topic_name("in")
    expected, _ = _poison_input(kafka_bootstrap, source)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "s",
        **{"task.drop.deserialization.errors": "true"}))
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "dropped" in run.stderr
    assert dump_store(conf, "counts") == dict(expected)


def test_poison_message_goes_to_dead_letter_topic(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, dlq = topic_name("in"), topic_name("dlq")
    expected, offset = _poison_input(kafka_bootstrap, source)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "s",
        **{"task.dlq.stream": f"kafka.{dlq}"}))
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-2000:]
    assert dump_store(conf, "counts") == dict(expected)
    [dead] = read_topic(kafka_bootstrap, dlq)
    assert dead.value() == b"{not json" and dead.key() == b"user-1"
    headers = dict(dead.headers())
    assert headers["millpond.offset"] == str(offset).encode()
    assert headers["millpond.topic"] == source.encode()
    assert b"deserialization" in headers["millpond.error"]


@pytest.mark.parametrize("problem", ["partitions", "policy"])
def test_unusable_changelog_is_refused(
    problem: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    changelog = f"{name}-counts-changelog"
    if problem == "partitions":
        create_topic(kafka_bootstrap, changelog, 3, **{"cleanup.policy": "compact"})
    else:
        create_topic(kafka_bootstrap, changelog, 2, **{"cleanup.policy": "delete"})
    conf = write_properties(tmp_path / "job.properties",
                            counting_job(kafka_bootstrap, name, source, tmp_path / "s"))
    run = run_job(conf, "--bounded")
    assert run.returncode == 2  # the job's topics do not fit it: the operator's to fix
    if problem == "partitions":
        assert f"{changelog} has 3 partitions but the job has 2 tasks" in run.stderr
    else:
        assert f"{changelog} has cleanup.policy=delete" in run.stderr
        assert "cleanup.policy=compact" in run.stderr


def test_restore_rebuilds_a_deleted_store_identically(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 2)
    produce_users(kafka_bootstrap, source, 3000, 150, 2)
    name = topic_name("job")
    conf = write_properties(tmp_path / "job.properties",
                            counting_job(kafka_bootstrap, name, source, tmp_path / "s"))
    assert run_job(conf, "--bounded").returncode == 0
    before = millpond("store", "dump", "--config", str(conf), "--store", "counts").stdout
    assert before.count("\n") == 150
    for path in (tmp_path / "s" / name / "counts").glob("partition-1*"):
        import shutil

        shutil.rmtree(path) if path.is_dir() else path.unlink()
    restored = millpond("restore", "--config", str(conf))
    assert restored.returncode == 0, restored.stderr
    assert "full" in restored.stdout
    after = millpond("store", "dump", "--config", str(conf), "--store", "counts").stdout
    assert after == before


def test_restore_listener_sees_a_full_restore(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    import shutil

    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    produce_users(kafka_bootstrap, source, 1000, 30, 1)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "s",
        **{"task.restore.listener.class": "tests.jobs.counting.RecordingRestoreListener"}))
    events = tmp_path / "events.txt"
    env = {"MILLPOND_TEST_EVENTS": str(events)}
    assert run_job(conf, "--bounded", env=env).returncode == 0
    shutil.rmtree(tmp_path / "s")
    events.unlink()
    run = run_job(conf, "--bounded", env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = events.read_text().splitlines()
    assert lines[0] == "start counts 0 0"
    assert lines[-1] == "end counts 0 30", lines
    assert any(line.startswith("batch counts 0") for line in lines)

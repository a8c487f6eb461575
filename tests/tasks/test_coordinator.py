"""``coordinator.commit()`` and ``coordinator.shutdown()`` called from a task, against a real
broker with real `millpond run` processes (README: "commit() commits after the current
message; shutdown() stops the container cleanly")."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    OutputLines,
    checkpoint_records,
    counting_job,
    create_topic,
    dump_store,
    hash_partition,
    latest_by_key,
    produce_users,
    read_topic,
    run_job,
    start_job,
    task_summaries,
    user_sequence,
    write_properties,
)

pytestmark = pytest.mark.kafka

NEVER_MS = 600_000  # a task.commit.ms that never fires within a test
READY = " ready: restored"  # a task's "ready" log line


def _job(bootstrap: str, name: str, source: str, state: Path, **extra: Any) -> dict[str, Any]:
    return counting_job(bootstrap, name, source, state, **{
        "task.class": "tests.jobs.coordinating.CoordinatingCounter", **extra})


def _wait_for_checkpoints(bootstrap: str, name: str, partition: int, count: int,
                          timeout: float = 60) -> list[dict[str, int]]:
    """Poll the checkpoint topic until ``partition`` has ``count`` committed checkpoints."""
    deadline = time.monotonic() + timeout
    while True:
        records = checkpoint_records(bootstrap, name).get(partition, [])
        if len(records) >= count or time.monotonic() > deadline:
            return [inputs for _, inputs in records]
        time.sleep(0.5)


def test_commit_commits_after_the_message_that_asked(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The task asks for a commit after offsets 19 and 39 of 60; task.commit.ms never fires.
    Exactly those two checkpoints appear while the job runs, and the committed changelog
    holds the counts of the first 40 messages; the final commit at SIGTERM adds the rest."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    expected = produce_users(kafka_bootstrap, source, 60, 10, 1)
    [seq] = user_sequence(60, 10, 1).values()
    conf = write_properties(tmp_path / "job.properties", _job(
        kafka_bootstrap, name, source, tmp_path / "s",
        **{"task.commit.ms": NEVER_MS, "commit.at.offsets": "19,39"}))
    proc = start_job(conf)
    try:
        committed = _wait_for_checkpoints(kafka_bootstrap, name, 0, 2)
        assert committed == [{source: 20}, {source: 40}], committed
        # The committed changelog is the state after offset 39: nothing of the 20 messages
        # processed since (they are only in the object cache) is visible.
        changelog = latest_by_key(read_topic(kafka_bootstrap, f"{name}-counts-changelog"))
        assert {k.decode(): json.loads(v) for k, v in changelog.items() if v is not None} \
            == dict(Counter(seq[:40]))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:]
    assert task_summaries(out) == {0: (60, 3)}, out[-3000:]  # two asked for + the last one
    assert [i for _, i in checkpoint_records(kafka_bootstrap, name)[0]] == [
        {source: 20}, {source: 40}, {source: 60}]
    assert dump_store(conf, "counts") == dict(expected)


def test_commit_asked_in_window_commits_after_the_window(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """window() (every 300 ms) asks for a commit once messages came; with no more input
    and task.commit.ms never firing, the commit still happens right after that window."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    expected = produce_users(kafka_bootstrap, source, 50, 10, 1)
    conf = write_properties(tmp_path / "job.properties", _job(
        kafka_bootstrap, name, source, tmp_path / "s",
        **{"task.commit.ms": NEVER_MS, "task.window.ms": 300, "commit.in.window": "true"}))
    proc = start_job(conf)
    out = OutputLines(proc)
    try:
        out.wait_for("the task ready", lambda ls: any(READY in x for x in ls))
        committed = _wait_for_checkpoints(kafka_bootstrap, name, 0, 1, timeout=30)
        assert committed == [{source: 50}], committed
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, out.text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert task_summaries(out.text()) == {0: (50, 2)}, out.text()[-3000:]
    assert dump_store(conf, "counts") == dict(expected)


def test_commit_asked_by_one_task_does_not_delay_the_others(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Input arrives live for 3 s; task 0 asks for a commit every 5 messages (every ~50 ms),
    task 1 never asks. Task 1 is still committed every task.commit.ms (500 ms) meanwhile,
    not only when the job stops."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    conf = write_properties(tmp_path / "job.properties", _job(
        kafka_bootstrap, name, source, tmp_path / "s",
        **{"task.commit.ms": 500, "commit.every.messages": 5, "coordinate.partitions": "0",
           "shutdown.at.offset": 299}))
    proc = start_job(conf)
    out = OutputLines(proc)
    try:
        out.wait_for("both tasks ready", lambda ls: sum(READY in x for x in ls) == 2)
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 1})
        began = time.monotonic()
        for i in range(300):  # one message to each partition every 10 ms
            for p in (0, 1):
                producer.produce(source, key=b"k", value=json.dumps({"user_id": f"user-{p}"}),
                                 partition=p)
            producer.poll(0)
            time.sleep(max(0.0, began + (i + 1) * 0.01 - time.monotonic()))
        assert producer.flush(30) == 0
        assert proc.wait(timeout=60) == 0, out.text()[-3000:]  # task 0's shutdown() ends it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    log = out.text()
    summaries = task_summaries(log)
    ckpts = checkpoint_records(kafka_bootstrap, name)
    assert summaries[0][0] == 300, log[-3000:]
    # Task 0 committed after every 5th message (and with the others on the timer).
    assert {i[source] for _, i in ckpts[0]} >= set(range(5, 301, 5)), ckpts[0]
    assert summaries[1][1] >= 3, f"task 1 was not committed while task 0 asked: {summaries}"
    assert [len(ckpts[p]) for p in (0, 1)] == [summaries[p][1] for p in (0, 1)]


def test_shutdown_stops_the_container_after_the_message_that_asked(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Task 0 calls shutdown() at offset 29: the unbounded job exits 0 by itself with task 0
    committed exactly up to that message and every other task committed where it stopped;
    a rerun resumes there and ends exact."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 400, 20, 2)
    seqs = user_sequence(400, 20, 2)
    conf = write_properties(tmp_path / "job.properties", _job(
        kafka_bootstrap, name, source, tmp_path / "s",
        **{"task.commit.ms": NEVER_MS, "shutdown.at.offset": 29,
           "coordinate.partitions": "0"}))
    run = run_job(conf, timeout=90)  # no --bounded: only shutdown() ends it
    assert run.returncode == 0, run.stderr[-3000:]
    assert "asks for a shutdown after offset 29" in run.stderr
    summaries = task_summaries(run.stderr)
    assert summaries[0] == (30, 1), run.stderr[-3000:]  # later messages not processed
    done1 = summaries[1][0] if 1 in summaries else 0
    ckpts = checkpoint_records(kafka_bootstrap, name)
    assert [i for _, i in ckpts[0]] == [{source: 30}]
    if 1 in summaries:
        assert [i for _, i in ckpts[1]] == [{source: done1}]
    state = dump_store(conf, "counts")
    for p, done in ((0, 30), (1, done1)):
        assert {u: c for u, c in state.items() if hash_partition(u, 2) == p} \
            == dict(Counter(seqs[p][:done])), p
    rerun = run_job(conf, "--bounded", "--config-override", "shutdown.at.offset=-1",
                    timeout=90)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert task_summaries(rerun.stderr) == {
        0: (len(seqs[0]) - 30, 1), 1: (len(seqs[1]) - done1, 1)}, rerun.stderr[-3000:]
    assert dump_store(conf, "counts") == dict(expected)

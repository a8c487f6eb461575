"""Tasks commit in turns while the loop keeps up, together under load (real broker, real
`millpond run` processes; millpond.tasks.turns). The checkpoint records' timestamps show
when each task's transaction wrote its checkpoint."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from millpond.tasks.faults import CRASH_LOG
from tests.kafka_util import (
    OutputLines,
    checkpoint_records,
    counting_job,
    create_topic,
    dump_store,
    hash_partition,
    produce_users,
    run_job,
    start_job,
    stop_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

READY = " ready: restored"


def _commit_times(bootstrap: str, name: str) -> dict[int, list[float]]:
    """Each task's checkpoint times but its last (the shutdown's final commit of all)."""
    return {p: [t for t, _ in recs[:-1]] for p, recs in checkpoint_records(bootstrap, name).items()}


def _nearest_other(times: dict[int, list[float]], p: int, t: float) -> float:
    return min(abs(t - u) for q, us in times.items() if q != p for u in us)


def test_a_job_that_keeps_up_commits_its_tasks_in_turns(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 4)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "s", **{"task.commit.ms": 1000}))
    proc = start_job(conf)
    out = OutputLines(proc)
    sent = 0
    try:
        out.wait_for("four tasks ready", lambda ls: sum(READY in x for x in ls) == 4)
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 1})
        began = time.monotonic()
        while time.monotonic() - began < 6.0:  # ~200 msg/s over 4 partitions: light
            producer.produce(source, value=json.dumps({"user_id": f"user-{sent % 40}"}),
                             key=f"user-{sent % 40}".encode(), partition=sent % 4)
            sent += 1
            producer.poll(0)
            time.sleep(0.005)
        assert producer.flush(30) == 0
        time.sleep(1.5)
    finally:
        stop_job(proc)
    assert proc.returncode == 0, out.text()[-3000:]
    times = _commit_times(kafka_bootstrap, name)
    assert sorted(times) == [0, 1, 2, 3] and all(len(ts) >= 4 for ts in times.values()), times
    # each commit of a task (after the first round, which took its turns too) stands apart
    # from the other tasks' by a turn's gap; all together, they would be milliseconds apart
    gaps = [_nearest_other(times, p, t) for p, ts in times.items() for t in ts]
    apart = sum(g >= 0.06 for g in gaps) / len(gaps)
    assert apart >= 0.8, f"{apart:.0%} of commits a turn apart: {sorted(gaps)[:12]}"
    state = dump_store(conf, "counts")
    assert sum(state.values()) == sent, "the counts are not the input's"


def test_a_job_under_load_commits_its_tasks_together(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 4)
    expected = produce_users(kafka_bootstrap, source, 600_000, 1000, 4)  # 150k a partition
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "s", **{"task.commit.ms": 200}))
    proc = start_job(conf)
    out = OutputLines(proc)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # every task committed its whole backlog
            records = checkpoint_records(kafka_bootstrap, name)
            if len(records) == 4 and all(
                    recs[-1][1].get(source, 0) >= 150_000 for recs in records.values()):
                break
            assert proc.poll() is None, out.text()[-3000:]
            time.sleep(0.5)
        else:
            raise AssertionError(f"the backlog was not counted within 120 s: {records}")
    finally:
        stop_job(proc)
    assert proc.returncode == 0, out.text()[-3000:]
    records = checkpoint_records(kafka_bootstrap, name)
    # the commits while the backlog lasted (input offsets below the partition's end)
    loaded = {p: [t for t, ins in recs[:-1] if ins.get(source, 0) < 140_000]
              for p, recs in records.items()}
    assert all(len(ts) >= 3 for ts in loaded.values()), loaded
    # while every task had a backlog: partitions drain at their own rates (librdkafka's
    # fetches took one partition 1.4 s behind the others in 2 of ~15 runs), and a task still
    # loaded after the others caught up has nobody to commit with
    every = min(max(ts) for ts in loaded.values())
    loaded = {p: [t for t in ts if t <= every] for p, ts in loaded.items()}
    assert all(len(ts) >= 2 for ts in loaded.values()), loaded
    # every other task committed within 50 ms of each commit (in turns, at 200 ms: two
    # turns of two tasks, 100 ms apart)
    together = [all(min((abs(t - u) for u in loaded[q]), default=1.0) < 0.05
                    for q in loaded if q != p) for p, ts in loaded.items() for t in ts]
    assert sum(together) / len(together) >= 0.8, loaded
    assert dump_store(conf, "counts") == dict(expected)


@pytest.mark.parametrize(("point", "commit_ms"), [
    ("after-flush", 1000), ("after-transaction-commit", 1000),
    ("after-local-checkpoint", 1000),
    ("after-transaction-commit", 100),  # every task in one shared turn, each pipelined
])
def test_a_kill_inside_a_pipelined_commit_loses_nothing(
    point: str, commit_ms: int, kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path
) -> None:
    """A turn's commit runs on a commit thread while the loop handles the other tasks
    (millpond.tasks.commit, CommitProtocol.start): a SIGKILL on the loop's side of it
    (after-flush) or on the commit thread's (after the transaction, after the local
    checkpoint) leaves state that the next run completes exactly. At 100 ms the four
    tasks share one turn and each starts its own pipelined commit."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 4)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "s", **{"task.commit.ms": commit_ms}))
    proc = start_job(conf, "--log-level", "DEBUG",
                     env={"MILLPOND_CRASH_AT": f"{point}:3:moved"})
    out = OutputLines(proc)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 1})
    expected: Counter[str] = Counter()
    try:
        out.wait_for("four tasks ready", lambda ls: sum(READY in x for x in ls) == 4)
        deadline = time.monotonic() + 30
        while proc.poll() is None:  # ~200 msg/s over 4 partitions until the kill
            assert time.monotonic() < deadline, out.text()[-3000:]
            user = f"user-{sum(expected.values()) % 40}"
            producer.produce(source, value=json.dumps({"user_id": user}), key=user.encode(),
                             partition=hash_partition(user, 4))
            expected[user] += 1
            producer.poll(0)
            time.sleep(0.005)
        assert producer.flush(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    log = out.text()
    assert proc.returncode == -signal.SIGKILL, log[-3000:]
    assert f"{CRASH_LOG} {point} (task " in log, log[-3000:]
    assert "pipelined commit of task" in log, "no turn was pipelined before the kill"
    final = run_job(conf, "--bounded")
    assert final.returncode == 0, final.stdout + final.stderr
    assert dump_store(conf, "counts") == dict(expected)

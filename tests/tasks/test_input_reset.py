"""Input deleted before it was processed (retention, DeleteRecords): the reset policy.

A per-record counting job over 3 partitions, against the real broker: partition 0 is the
control (no gap), partition 1 gets a gap inside the log (records 20..29 deleted, 30..39
still there), partition 2 a gap to the end (20..39 deleted, nothing newer). The gap is made
with ``AdminClient.delete_records`` while the job is stopped (between two runs) or while it
runs (its fetch goes out of range mid-run). Every record has its own key, so the store dump
says exactly which records were processed, and how often. For each policy of
``systems.kafka.consumer.auto.offset.reset``:

* earliest / latest: the state holds exactly the records that still existed (latest: only
  those before the gap), each once; one WARNING per affected partition with the offsets and
  the count; ``millpond_input_records_skipped_total`` per topic, partition and reason; the
  next commit moves the checkpoint to the new position (also at the partition's end) and
  ``millpond status`` shows the skipped count; a restart does not warn again;
* error: the job stops with one line naming topic, partition, checkpointed offset and log
  start, and every committed checkpoint and the state stay as they were.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from tests.kafka_util import (
    OutputLines,
    checkpoint_history,
    counting_job,
    create_topic,
    dump_store,
    millpond,
    run_job,
    start_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

N = 20  # records per partition per batch
CONTROL, INSIDE, TO_END = 0, 1, 2
LOG_START = {INSIDE: 30, TO_END: 40}  # where delete_records moves each gap partition's start
URL_LINE = re.compile(r"Prometheus metrics at (http://\S+/metrics)")
WARNING = re.compile(
    r"WARNING.*input (\S+)\[(\d+)\] (at start|while running): the (?:checkpointed|next) "
    r"offset (\d+) .*; resuming at offset (\d+) \(auto\.offset\.reset=(\w+)\): (\d+) records "
    r"skipped \((\d+) deleted, (\d+) still in Kafka\)")


def user(p: int, i: int) -> str:
    return f"p{p}-{i:03d}"


def produce(producer: Producer, topic: str, start: int, n: int) -> None:
    for p in (CONTROL, INSIDE, TO_END):
        for i in range(start, start + n):
            producer.produce(topic, key=user(p, i), value=json.dumps({"user_id": user(p, i)}),
                             partition=p)
    producer.flush(30)


def delete_gaps(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, p, off) for p, off in LOG_START.items()])
    for future in futures.values():
        future.result(30)


def watermarks(bootstrap: str, topic: str, p: int) -> tuple[int, int]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm",
                  "isolation.level": "read_committed"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
    finally:
        c.close()


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    """Poll ``check`` until it returns something true, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s (last: {got!r})")
        time.sleep(0.2)  # a poll interval, not a wait for something to happen


def last_checkpoints(bootstrap: str, job: str, topic: str) -> dict[int, int]:
    history = checkpoint_history(bootstrap, job)
    return {int(task.rsplit("-", 1)[1]): offsets[-1].get(topic, -1)
            for task, offsets in history.items() if offsets}


def wait_checkpoints(bootstrap: str, job: str, topic: str, want: dict[int, int],
                     timeout: float = 60) -> None:
    """Wait until the job's last committed checkpoints are ``want`` (partition -> offset)."""
    seen: list[dict[int, int]] = [{}]

    def check() -> bool:
        seen[0] = last_checkpoints(bootstrap, job, topic)
        return seen[0] == want

    try:
        wait_until("checkpoints", check, timeout)
    except AssertionError:
        raise AssertionError(f"checkpoints {seen[0]} never became {want}") from None


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The consumer group's committed offsets of ``topic`` (read without joining it)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in (CONTROL, INSIDE, TO_END)], 10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def status(config: Path) -> dict[int, dict[str, Any]]:
    out = millpond("status", "--config", str(config), "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    return {row["partition"]: row for row in json.loads(out.stdout)["partitions"]}


def scrape_skipped(url: str) -> dict[tuple[str, str, str], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "millpond_input_records_skipped_total":
                out[(s.labels["topic"], s.labels["partition"], s.labels["reason"])] = s.value
    return out


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Jobs a test started: killed at its end if still running."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


@pytest.fixture
def job(kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
        ) -> Callable[..., tuple[Path, str, str]]:
    """Make the job: (config path, job name, input topic)."""

    def make(policy: str, guarantee: str = "effectively-once") -> tuple[Path, str, str]:
        topic = topic_name("in")
        create_topic(kafka_bootstrap, topic, 3)
        name = topic_name("job")
        props = counting_job(kafka_bootstrap, name, topic, tmp_path / "state", **{
            "systems.kafka.consumer.auto.offset.reset": policy,
            "task.processing.guarantee": guarantee,
            "metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": 0})
        return write_properties(tmp_path / "job.properties", props), name, topic

    return make


def expected_state(positions: dict[int, tuple[int, int]]) -> dict[str, int]:
    """Every record of each partition in [0, before) and [after, 40), counted once."""
    out = {}
    for p, (before, after) in positions.items():
        for i in [*range(0, before), *range(after, 2 * N)]:
            out[user(p, i)] = 1
    return out


def start_and_prime(config: Path, bootstrap: str, name: str, topic: str,
                    procs: list[subprocess.Popen[str]],
                    ) -> tuple[subprocess.Popen[str], OutputLines]:
    proc = start_job(config)
    procs.append(proc)
    lines = OutputLines(proc)
    wait_checkpoints(bootstrap, name, topic, {0: N, 1: N, 2: N})
    return proc, lines


def test_gap_while_running_earliest(kafka_bootstrap: str,
                                    job: Callable[..., tuple[Path, str, str]],
                                    procs: list[subprocess.Popen[str]]) -> None:
    """The short version in `make test`: the default policy, the gap made while the job
    runs (the silent case of the issue), then a restart that must not warn again. The
    other policies and the stopped job: tests/faults/test_input_gaps.py."""
    gap_scenario(kafka_bootstrap, job, procs, "earliest", "running")


def gap_scenario(kafka_bootstrap: str, job: Callable[..., tuple[Path, str, str]],
                 procs: list[subprocess.Popen[str]], policy: str, when: str) -> None:
    """One policy, one time the gap appears (``stopped`` between two runs, ``running``)."""
    # Stopped: Samza's spellings; running: exactly-once, whose consumer reads committed
    # records only, so a transaction can hold the second batch back while the gap is made.
    if when == "stopped":
        config, name, topic = job({"earliest": "smallest", "latest": "latest",
                                   "error": "none"}[policy])
    else:
        config, name, topic = job(policy, "exactly-once")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    produce(producer, topic, 0, N)
    if when == "stopped":
        done = run_job(config, "--bounded", timeout=90)
        assert done.returncode == 0, done.stdout + done.stderr
        produce(producer, topic, N, N)
        delete_gaps(kafka_bootstrap, topic)
        if policy == "error":
            stopped = run_job(config, "--bounded", timeout=90)
            proc = None
        else:
            proc = start_job(config)
            procs.append(proc)
            lines = OutputLines(proc)
    else:
        proc, lines = start_and_prime(config, kafka_bootstrap, name, topic, procs)
        # A transaction holds the second batch back while the gap is made: no record of it
        # is fetched before its deletion.
        txn = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{name}-t"})
        txn.init_transactions(30)
        txn.begin_transaction()
        produce(txn, topic, N, N)
        os.kill(proc.pid, signal.SIGSTOP)  # the job sees the gap once it is complete
        try:
            delete_gaps(kafka_bootstrap, topic)
            txn.commit_transaction(30)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
    marks = {p: watermarks(kafka_bootstrap, topic, p) for p in (CONTROL, INSIDE, TO_END)}
    when_text = "at start" if when == "stopped" else "while running"

    if policy == "error":
        if proc is not None:
            assert proc.wait(timeout=60) == 1  # lost input: a runtime failure
            err = lines.text()
        else:
            assert stopped.returncode == 1, stopped.stdout + stopped.stderr
            err = stopped.stderr
        gap = re.findall(rf"input {re.escape(topic)}\[(\d)\] {when_text}: the (?:checkpointed|next) "
                         rf"offset 20 no longer exists: the log starts at (\d+)", err)
        assert gap and int(gap[0][1]) == LOG_START[int(gap[0][0])], err
        assert "auto.offset.reset=error stops the job, nothing committed is lost" in err
        # Nothing committed is lost: the gap partitions' checkpoints stay at 20, and the
        # state is exactly what every checkpoint says was processed.
        rows = status(config)
        committed = {p: rows[p]["committed"][topic] for p in rows}
        assert committed[INSIDE] == committed[TO_END] == N
        assert dump_store(config, "counts") == expected_state(
            {p: (committed[p], 2 * N) for p in committed})
        if when == "stopped":  # the user changes the policy: the job goes on
            again = run_job(config, "--bounded", "--config-override",
                            "systems.kafka.consumer.auto.offset.reset=earliest", timeout=90)
            assert again.returncode == 0, again.stdout + again.stderr
            assert dump_store(config, "counts") == expected_state(
                {CONTROL: (2 * N, 2 * N), INSIDE: (N, 30), TO_END: (N, 2 * N)})
        return

    assert proc is not None
    # The new position: the log start (earliest) or the end (latest).
    new = {p: marks[p][0] if policy == "earliest" else marks[p][1] for p in LOG_START}
    found = lines.wait_for("a warning per gap partition",
                           lambda ls: len(WARNING.findall("".join(ls))) >= 2)
    warnings = WARNING.findall("".join(found))
    assert sorted((int(w[1]), w) for w in warnings) == [
        (p, (topic, str(p), when_text, str(N), str(new[p]),
             "earliest" if policy == "earliest" else "latest", str(new[p] - N),
             str(LOG_START[p] - N), str(new[p] - LOG_START[p])))
        for p in (INSIDE, TO_END)]
    # The next commit moves the checkpoint there, also at the partition's end.
    want = {CONTROL: 2 * N, INSIDE: 2 * N if policy == "earliest" else new[INSIDE],
            TO_END: new[TO_END]}
    wait_checkpoints(kafka_bootstrap, name, topic, want)
    # ... and the group's offsets, so lag tools agree with millpond status.
    wait_until("group offsets at the new positions",
               lambda: group_offsets(kafka_bootstrap, f"{name}-1", topic) == want, 30)
    url = URL_LINE.search("".join(lines.lines))
    assert url, "".join(lines.lines)
    expected_metric = {(topic, str(p), "deleted"): float(LOG_START[p] - N) for p in LOG_START}
    if policy == "latest":
        expected_metric.update({(topic, str(p), "reset_latest"): float(new[p] - LOG_START[p])
                                for p in LOG_START if new[p] > LOG_START[p]})
    assert scrape_skipped(url.group(1)) == expected_metric
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, lines.text()
    assert len(WARNING.findall(lines.text())) == 2  # one per affected partition

    after = {CONTROL: (2 * N, 2 * N), INSIDE: (N, LOG_START[INSIDE] if policy == "earliest"
                                                else 2 * N), TO_END: (N, 2 * N)}
    assert dump_store(config, "counts") == expected_state(after)
    rows = status(config)
    assert {p: rows[p]["skipped"] for p in rows} == {
        CONTROL: {}, INSIDE: {topic: new[INSIDE] - N}, TO_END: {topic: new[TO_END] - N}}
    assert all(not rows[p]["deleted"] for p in rows)
    table = millpond("status", "--config", str(config))
    assert f"{topic}: {new[INSIDE] - N:,} input records skipped" in table.stdout, table.stdout

    if policy == "earliest":  # the next start resumes where the last commit put it: no warning
        again = run_job(config, "--bounded", timeout=90)
        assert again.returncode == 0, again.stdout + again.stderr
        assert not WARNING.findall(again.stdout + again.stderr)
        assert dump_store(config, "counts") == expected_state(after)

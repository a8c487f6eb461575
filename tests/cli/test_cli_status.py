"""``millpond status`` and ``millpond topics create`` as a user runs them: the installed console
script against the real broker, each answer checked against Kafka and the job's own state.

status: a job that never ran (exit 1), a stopped job (offsets, lag, checkpoint time and
changelog offsets, clean / dirty / absent local stores), a running job (its process owns every
partition) and a job of two processes (two owners, between them every partition).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka_util import (
    OutputLines,
    counting_job,
    create_topic,
    hash_partition,
    millpond,
    produce_users,
    run_job,
    start_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

TIMEOUT = 30


def _job_conf(bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
              partitions: int) -> tuple[Path, str, str]:
    """A counting job's config over a new input topic (dynamic membership: a stopped
    process leaves the group at once). Returns (config, job name, input topic)."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(bootstrap, source, partitions)
    props = counting_job(bootstrap, name, source, tmp_path / "state")
    del props["systems.kafka.consumer.group.instance.id"]
    return write_properties(tmp_path / "job.properties", props), name, source


def _status(conf: Path) -> dict[str, Any]:
    out = millpond("status", "--config", str(conf), "--format", "json", timeout=TIMEOUT * 2)
    assert out.returncode == 0, out.stdout + out.stderr
    return dict(json.loads(out.stdout))


def _ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "status-test"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def _per_partition(expected: Counter[str], partitions: int) -> dict[int, int]:
    out = dict.fromkeys(range(partitions), 0)
    for user, n in expected.items():
        out[hash_partition(user, partitions)] += n
    return out


def _wait_status(conf: Path, what: str, ok: Callable[[dict[str, Any]], bool],
                 timeout: float = 90) -> dict[str, Any]:
    """Poll ``millpond status`` until ``ok`` holds (bounded); the last answer."""
    deadline = time.monotonic() + timeout
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        out = millpond("status", "--config", str(conf), "--format", "json", timeout=TIMEOUT * 2)
        # A process still starting may not have created the checkpoint topic yet.
        starting = out.returncode == 2 and "has never run" in out.stderr
        assert out.returncode == 0 or starting, out.stdout + out.stderr
        last = json.loads(out.stdout) if out.returncode == 0 else {}
        if last and ok(last):
            return last
        time.sleep(1)
    raise AssertionError(f"{what}: not seen within {timeout} s; last status:\n"
                         + json.dumps(last, indent=1)[-3000:])


def _stop(proc: subprocess.Popen[str], lines: OutputLines) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, lines.text()[-3000:]


def test_status_of_a_job_that_never_ran_says_so_and_exits_1(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    conf, name, _ = _job_conf(kafka_bootstrap, topic_name, tmp_path, 2)
    for fmt in ("table", "json"):
        out = millpond("status", "--config", str(conf), "--format", fmt, timeout=TIMEOUT * 2)
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"job {name} (id 1) has never run" in out.stderr, out.stderr
        assert f"no checkpoint topic __millpond_checkpoint_{name}_1" in out.stderr
        assert out.stdout == ""


def test_status_of_a_stopped_job(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    conf, name, source = _job_conf(kafka_bootstrap, topic_name, tmp_path, 2)
    expected = produce_users(kafka_bootstrap, source, 900, 50, 2)
    began_ms = time.time() * 1000
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    ended_ms = time.time() * 1000
    per_partition = _per_partition(expected, 2)

    doc = _status(conf)
    assert (doc["group"], doc["members"]) == (f"{name}-1", 0)
    checkpoints = json.loads(millpond("checkpoint", "show", "--config", str(conf),
                                      "--format", "json").stdout)
    changelog = f"{name}-counts-changelog"
    changelog_ends = _ends(kafka_bootstrap, changelog, 2)
    rows = {r["partition"]: r for r in doc["partitions"]}
    assert sorted(rows) == [0, 1]
    for p, row in rows.items():
        assert row["owner"] is None  # nobody runs it
        assert row["committed"] == {source: per_partition[p]}
        assert row["end"] == {source: per_partition[p]}
        assert row["lag"] == 0
        ckpt = row["checkpoint"]
        assert ckpt["inputs"] == checkpoints[f"partition-{p}"]["inputs"]
        assert ckpt["changelogs"] == checkpoints[f"partition-{p}"]["changelogs"]
        assert began_ms <= ckpt["timestamp_ms"] <= ended_ms
        assert ckpt["time"].endswith("Z")
        [store] = row["stores"]
        assert store["store"] == "counts" and store["changelog"] == changelog
        assert store["end"] == changelog_ends[p]
        assert store["checkpointed"] == ckpt["changelogs"]["counts"]
        assert (store["local"], store["local_offset"], store["local_lag"]) == (
            "clean", store["checkpointed"], 0)

    # More input: the lag is exactly what was produced since, per partition.
    more = produce_users(kafka_bootstrap, source, 300, 50, 2)
    more_per_partition = _per_partition(more, 2)
    # A lost store directory reads as absent, one without its OFFSET file as dirty.
    stores = tmp_path / "state" / name / "counts"
    shutil.rmtree(stores / "partition-0")
    (stores / "partition-1" / "OFFSET").unlink()
    doc = _status(conf)
    for row in doc["partitions"]:
        p = row["partition"]
        assert row["committed"] == {source: per_partition[p]}
        assert row["end"] == {source: per_partition[p] + more_per_partition[p]}
        assert row["lag"] == more_per_partition[p] > 0
        assert row["stores"][0]["local"] == ("absent" if p == 0 else "dirty")
        assert row["stores"][0]["local_offset"] is None

    table = millpond("status", "--config", str(conf))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == f"group {name}-1: empty, 0 member(s)"
    assert lines[1].split()[:5] == ["part", "owner", "committed", "end", "lag"]
    cells = {int(line.split()[0]): line.split() for line in lines[2:]}
    assert sorted(cells) == [0, 1]
    for p, c in cells.items():
        assert c[1:5] == ["-", str(per_partition[p]),
                          str(per_partition[p] + more_per_partition[p]),
                          str(more_per_partition[p])]
        assert c[-1] == ("absent" if p == 0 else "dirty")

    # Elsewhere (no state dir on this machine) the local state is unknown, not "absent".
    shutil.rmtree(tmp_path / "state")
    doc = _status(conf)
    assert [r["stores"][0]["local"] for r in doc["partitions"]] == [None, None]


def test_status_of_a_running_job_and_of_two_processes(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    conf, name, source = _job_conf(kafka_bootstrap, topic_name, tmp_path, 4)
    expected = produce_users(kafka_bootstrap, source, 800, 40, 4)
    per_partition = _per_partition(expected, 4)
    first = start_job(conf)
    first_lines = OutputLines(first)
    second: subprocess.Popen[str] | None = None
    try:
        # One process: it owns every partition, and catches up (lag 0, committed = end).
        doc = _wait_status(conf, "one process owning all 4 partitions, caught up", lambda d: all(
            r["owner"] is not None and r["lag"] == 0 for r in d["partitions"]))
        assert (doc["group_state"], doc["members"]) == ("stable", 1)
        owners = {r["owner"]["member_id"] for r in doc["partitions"]}
        assert len(owners) == 1
        for row in doc["partitions"]:
            assert row["owner"]["client_id"].endswith(f":{first.pid}"), row["owner"]
            assert row["owner"]["host"]
            assert row["committed"] == row["end"] == {source: per_partition[row["partition"]]}

        # A second process of the same job: the partitions are shared between two owners.
        second = start_job(conf)
        second_lines = OutputLines(second)
        doc = _wait_status(conf, "two owners sharing the 4 partitions", lambda d: (
            d["members"] == 2 and all(r["owner"] is not None for r in d["partitions"])
            and len({r["owner"]["member_id"] for r in d["partitions"]}) == 2))
        pids = {r["owner"]["client_id"].rsplit(":", 1)[1] for r in doc["partitions"]}
        assert pids == {str(first.pid), str(second.pid)}
        by_pid: dict[str, set[int]] = {}
        for r in doc["partitions"]:
            by_pid.setdefault(r["owner"]["client_id"].rsplit(":", 1)[1], set()).add(
                r["partition"])
        assert by_pid[str(first.pid)].isdisjoint(by_pid[str(second.pid)])
        assert by_pid[str(first.pid)] | by_pid[str(second.pid)] == {0, 1, 2, 3}
        table = millpond("status", "--config", str(conf))
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines()[0] == f"group {name}-1: stable, 2 member(s)"
        _stop(second, second_lines)
        second = None
    finally:
        if second is not None and second.poll() is None:
            second.kill()
            second.wait(timeout=10)
        _stop(first, first_lines)
    # Stopped: nobody owns anything, and every partition resumes at its end.
    doc = _status(conf)
    assert doc["members"] == 0
    assert all(r["owner"] is None and r["lag"] == 0 for r in doc["partitions"])


def _partitions_of(bootstrap: str, topic: str) -> int | None:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=TIMEOUT)
    t = md.topics.get(topic)
    return None if t is None or t.error is not None else len(t.partitions)


def test_topics_create_is_idempotent_and_warns_on_another_partition_count(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    a, b, out = topic_name("in-a"), topic_name("in-b"), topic_name("out")
    props = counting_job(kafka_bootstrap, topic_name("job"), a, tmp_path / "state")
    props["task.inputs"] = f"kafka.{a},kafka.{b}"
    conf = write_properties(tmp_path / "job.properties", props)
    create = ("topics", "create", "--config", str(conf))

    made = millpond(*create, "--partitions", "3", "--output", f"kafka.{out}")
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == [
        f"created {t} (3 partitions, replication factor 1)" for t in (a, b, out)]
    assert [_partitions_of(kafka_bootstrap, t) for t in (a, b, out)] == [3, 3, 3]

    again = millpond(*create, "--partitions", "3", "--output", out)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"exists  {t} (3 partitions)" for t in (a, b, out)]
    assert again.stderr == ""

    other = millpond(*create, "--partitions", "5")
    assert other.returncode == 0, other.stderr
    assert other.stdout == ""
    warnings = other.stderr.splitlines()
    assert len(warnings) == 2
    for t, line in zip((a, b), warnings, strict=True):
        assert line.startswith(f"exists  {t} (3 partitions); warning: 5 were asked for"), line
    assert [_partitions_of(kafka_bootstrap, t) for t in (a, b)] == [3, 3]  # left alone

    # A name Kafka refuses: exit 1 naming it; the others were still made.
    c = topic_name("in-c")
    bad = millpond(*create, "--partitions", "2", "--output", "no/such|name",
                   "--output", c)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "could not create topic no/such|name: " in bad.stderr, bad.stderr
    assert _partitions_of(kafka_bootstrap, c) == 2

    usage = millpond(*create, "--partitions", "0")
    assert usage.returncode == 2 and "--partitions" in usage.stderr

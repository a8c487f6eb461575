"""Tasks commit in turns (docs/concepts/commits.md): on a light load each of a process's
tasks commits once every ``task.commit.ms`` in a turn of its own, so the run loop stops for
one task's commit at a time; under a backlog a task's turn commits every task together. A
real job on the real broker; the commits are read from its ``millpond.commit`` debug lines."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    counting_job,
    create_topic,
    produce_users,
    run_job,
    start_job,
    stop_job,
    write_properties,
)

pytestmark = pytest.mark.kafka
PARTITIONS = 4
COMMIT_LINE = re.compile(r"commit of (\d+) task\(s\) in")


def commit_sizes(log: str) -> list[int]:
    return [int(n) for n in COMMIT_LINE.findall(log)]


def test_on_a_light_load_each_task_commits_in_a_turn_of_its_own(
        kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path) -> None:
    topic = topic_name("in")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    props = counting_job(kafka_bootstrap, topic_name("job"), topic, tmp_path / "state",
                         **{"task.commit.ms": 400})
    job = start_job(write_properties(tmp_path / "job.properties", props),
                    "--log-level", "DEBUG")
    stop = threading.Event()

    def trickle() -> None:  # ~200 records a second over every partition
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
        i = 0
        while not stop.is_set():
            user = f"user-{i % 50}"
            producer.produce(topic, key=user.encode(), value=json.dumps({"user_id": user}),
                             partition=i % PARTITIONS)
            producer.poll(0)
            i += 1
            time.sleep(0.005)
        producer.flush(10)

    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    try:
        deadline = time.monotonic() + 60
        log: list[str] = []
        assert job.stdout is not None
        # read until the tasks have committed for ~4 s (10 turns each at 400 ms)
        while time.monotonic() < deadline:
            line = job.stdout.readline()
            if not line:
                break
            log.append(line)
            if len(commit_sizes("".join(log))) >= 40:
                break
    finally:
        stop.set()
        feeder.join(15)
        stop_job(job)
    sizes = commit_sizes("".join(log))
    assert len(sizes) >= 40, "".join(log[-30:])
    steady = sizes[1:]  # the first may meet tasks that opened together
    assert Counter(steady)[1] >= 0.9 * len(steady), Counter(steady)


def test_under_a_backlog_a_turn_commits_every_task_together(
        kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path) -> None:
    topic = topic_name("in")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce_users(kafka_bootstrap, topic, 500_000, 20_000, PARTITIONS)
    props = counting_job(kafka_bootstrap, topic_name("job"), topic, tmp_path / "state",
                         **{"task.commit.ms": 400})  # room for four turns of 100 ms
    done = run_job(write_properties(tmp_path / "job.properties", props), "--bounded",
                   "--log-level", "DEBUG", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    sizes = Counter(commit_sizes(done.stderr + done.stdout))
    # one commit in a backlog's stretch commits all four; a poll that found the input
    # empty for a moment (the fetch queue refilling) lets the next turns go one by one
    assert sizes[PARTITIONS] >= 3 and sizes[PARTITIONS] * PARTITIONS >= sizes[1], sizes

"""The commit and opening promises of docs/concepts/commits.md, against the real broker:

- each task writes through a producer whose ``transactional.id`` is ``<job>-<id>-partition-N``,
  so a new owner fences whoever held the task before (here a stand-in zombie with that id,
  its transaction left open over a bogus changelog record);
- every owner calls ``init_transactions`` before it reads the task's checkpoint and changelog;
- a task processes input only after all its stores are restored;
- the input offsets are committed to the consumer group (for lag tools) at each commit.

The job runs in this process so the order of those steps is recorded as the real code runs
them (fence, checkpoint read, restore, first batch), per task.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from millpond.config import Config
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import watermarks
from millpond.tasks import opening
from millpond.tasks.container import Container
from millpond.tasks.instance import TaskInstance
from millpond.tasks.storage import TaskStorage
from tests.kafka_util import (
    checkpoint_history,
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 2
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class Steps:
    """What each task did, in order: ``(step, partition)``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int]] = []
        self.restored: dict[int, int] = {}

    def add(self, step: str, partition: int) -> None:
        with self.lock:
            self.seen.append((step, partition))

    def of(self, partition: int) -> list[str]:
        """The steps of one task, each kept at its first occurrence."""
        out: list[str] = []
        for step, p in self.seen:
            if p == partition and step not in out:
                out.append(step)
        return out


def _record_steps(monkeypatch: pytest.MonkeyPatch) -> Steps:
    steps = Steps()
    real_init = TrackedProducer.init_transactions
    real_read = opening.read_checkpoints
    real_open = TaskStorage.open_steps
    real_batch = TaskInstance.handle_batch

    def init_transactions(self: TrackedProducer, timeout: float = 60.0) -> None:
        real_init(self, timeout)  # recorded once it returned: the fence is in place
        if "-partition-" in self.name:
            steps.add("fenced", int(self.name.rsplit("-", 1)[1]))

    def read_checkpoints(consumer: Any, topic: str, partitions: Any = None,
                         lenient: bool = False) -> Any:
        for p in partitions or ():
            steps.add("checkpoint read", p)
        return real_read(consumer, topic, partitions, lenient)

    def open_steps(cls: type[TaskStorage], config: Config, partition: int, *args: Any,
                   **kwargs: Any) -> Generator[Any, Any, TaskStorage]:
        steps.add("restore started", partition)
        storage = yield from real_open(config, partition, *args, **kwargs)
        steps.restored[partition] = storage.restored_records
        steps.add("restored", partition)
        return storage

    def handle_batch(self: TaskInstance, *args: Any, **kwargs: Any) -> int:
        steps.add("processed", self.partition)
        return real_batch(self, *args, **kwargs)

    monkeypatch.setattr(TrackedProducer, "init_transactions", init_transactions)
    monkeypatch.setattr(opening, "read_checkpoints", read_checkpoints)
    monkeypatch.setattr(TaskStorage, "open_steps", classmethod(open_steps))
    monkeypatch.setattr(TaskInstance, "handle_batch", handle_batch)
    return steps


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                   timeout=30)
        return {tp.partition: tp.offset for tp in parts}
    finally:
        consumer.close()


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return {p: watermarks(consumer, topic, p, 30)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def test_a_task_is_fenced_before_it_reads_its_state_and_processes_only_once_restored(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, PARTITIONS)
    expected = produce_users(kafka_bootstrap, source, 300, 20, PARTITIONS)
    config = write_properties(tmp_path / "job.properties",
                              counting_job(kafka_bootstrap, name, source, tmp_path / "state"))
    first = run_job(config, "--bounded", timeout=90)  # changelogs and checkpoints to restore
    assert first.returncode == 0, first.stdout + first.stderr

    # A zombie owner of task 0: the transactional id the docs name, a transaction left open
    # over a bogus count in task 0's changelog partition (user-0 is partition 0's).
    changelog = f"{name}-counts-changelog"
    zombie = Producer({"bootstrap.servers": kafka_bootstrap,
                       "transactional.id": f"{name}-1-partition-0",
                       "transaction.timeout.ms": 300_000})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(changelog, key=b"user-0", value=json.dumps(99_999).encode(), partition=0)
    assert zombie.flush(30) == 0

    # The local stores gone, so each task restores its changelog; more input to process.
    shutil.rmtree(tmp_path / "state")
    expected.update(produce_users(kafka_bootstrap, source, 100, 20, PARTITIONS))
    steps = _record_steps(monkeypatch)
    Container(Config.load(config), bounded=True, wait_timeout_s=60).run(install_signals=False)

    for p in range(PARTITIONS):
        assert steps.of(p) == ["fenced", "checkpoint read", "restore started", "restored",
                               "processed"], (p, steps.seen)
        assert steps.restored[p] > 0, steps.restored  # a real restore came before input
    # the job's task 0 fenced the zombie: its transaction was aborted, its commit refused
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    assert info.value.args[0].code() in FENCED, info.value
    counts = dump_store(config, "counts")
    assert counts == dict(expected), {k: (v, expected[k]) for k, v in counts.items()
                                      if v != expected[k]}

    # group offsets: the consumer group holds each partition's end, as the checkpoint does
    ends = _ends(kafka_bootstrap, source)
    assert _committed(kafka_bootstrap, f"{name}-1", source) == ends
    history = checkpoint_history(kafka_bootstrap, name)
    assert {int(t.rsplit("-", 1)[1]): h[-1][source] for t, h in history.items()} == ends

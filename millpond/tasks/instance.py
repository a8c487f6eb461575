"""One running task: a user StreamTask bound to one input partition and its stores."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from millpond.changelog.checkpoint import Checkpoint, task_name
from millpond.changelog.producer import TrackedProducer
from millpond.tasks.api import IncomingMessageEnvelope, StreamTask, TaskCoordinator
from millpond.tasks.collector import KafkaCollector
from millpond.tasks.storage import TaskStorage

# (stage, message, exception) -> True to skip the message, or raise to stop.
ErrorPolicy = Callable[[str, Message, BaseException], bool]


@dataclass
class TaskMetrics:
    """Per-task counters the container reports."""

    processed: int = 0
    skipped: int = 0
    process_ns: int = 0
    commits: int = 0
    commit_s: float = 0.0
    restored_records: int = 0
    restore_s: float = 0.0

    @property
    def process_latency_us(self) -> float:
        return self.process_ns / 1000 / self.processed if self.processed else 0.0


@dataclass
class TaskInstance:
    """The user task of one partition, with its storage, producer and input positions."""

    partition: int
    task: StreamTask
    storage: TaskStorage
    producer: TrackedProducer
    collector: KafkaCollector
    next_offsets: dict[str, int]  # input topic -> next offset to process
    coordinator: TaskCoordinator = field(default_factory=TaskCoordinator)
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    last_window: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return task_name(self.partition)

    def handle(self, msg: Message, serdes: tuple[Any, Any], on_error: ErrorPolicy) -> None:
        """Deserialize and process one message; advance the input position past it."""
        topic = msg.topic()
        assert topic is not None
        offset: int = msg.offset()  # type: ignore[assignment]
        key_serde, msg_serde = serdes
        try:
            key = msg.key()
            if key is not None and key_serde is not None:
                key = key_serde.from_bytes(key)
            value = msg.value()
            if value is not None and msg_serde is not None:
                value = msg_serde.from_bytes(value)
        except Exception as exc:
            if on_error("deserialization", msg, exc):
                self.metrics.skipped += 1
                self.next_offsets[topic] = offset + 1
            return
        envelope = IncomingMessageEnvelope(
            topic, self.partition, offset, key, value, msg.timestamp()[1],
            msg.headers() or (),  # type: ignore[arg-type]
        )
        began = time.perf_counter_ns()
        try:
            self.task.process(envelope, self.collector, self.coordinator)
        except Exception as exc:
            if not on_error("process", msg, exc):
                return
            self.metrics.skipped += 1
        self.metrics.process_ns += time.perf_counter_ns() - began
        self.metrics.processed += 1
        self.next_offsets[topic] = offset + 1

    def checkpoint(self) -> Checkpoint:
        """This task's position now (call after its producer was flushed)."""
        return Checkpoint(self.name, self.partition, dict(self.next_offsets),
                          self.storage.changelog_offsets(self.producer))

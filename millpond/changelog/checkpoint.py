"""Checkpoints: what a task had consumed and written when it last committed.

A checkpoint records, per task, the next input offset of each input partition and the
last changelog offset of each store. It is kept in two places:

* the job's compacted checkpoint topic (``__millpond_checkpoint_<job>_<id>``), keyed by
  task name, which is the source of truth for input offsets and restore targets. It has
  one partition per task, task N writing partition N, so under exactly-once a dead
  task's open transaction only holds back its own checkpoints (which its successor's
  ``init_transactions`` aborts), never the committed checkpoints of other tasks;
* an ``OFFSET`` file inside each local store directory, saying which changelog offset
  the store's content reflects (written to a temp file, fsynced, renamed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE

from millpond.changelog.errors import CheckpointError
from millpond.files import remove_file, write_atomically
from millpond.stores import permissions

OFFSET_FILE = "OFFSET"
NO_OFFSET = -1


def task_name(partition: int) -> str:
    """The task that owns ``partition`` of every input (Samza: one task per partition)."""
    return f"partition-{partition}"


def checkpoint_topic(job_name: str, job_id: str) -> str:
    """The compacted topic holding a job's checkpoints."""
    return f"__millpond_checkpoint_{job_name}_{job_id}"


@dataclass
class Checkpoint:
    """A task's committed position: input offsets (next to read) and changelog offsets."""

    task: str
    partition: int
    inputs: dict[str, int] = field(default_factory=dict)
    changelogs: dict[str, int] = field(default_factory=dict)  # store -> last written offset
    # store -> side-input topic -> next offset (stores filled from side inputs)
    side_inputs: dict[str, dict[str, int]] = field(default_factory=dict)
    # store -> changelog topic, for stores whose changelog is not the configured one (a
    # newer generation written by ``millpond spark rescale``); empty: the configured topics
    topics: dict[str, str] = field(default_factory=dict)
    # input topic -> records the task skipped because its position there no longer existed
    # (deleted by retention before it was read: millpond.tasks.input_reset), over its life
    skipped: dict[str, int] = field(default_factory=dict)
    # When it was written (the record's Kafka timestamp, ms) if read from the topic; not encoded.
    timestamp_ms: int | None = field(default=None, compare=False)

    def to_bytes(self) -> bytes:
        """The checkpoint topic's value encoding (JSON)."""
        doc: dict[str, Any] = {"version": 1, "task": self.task, "partition": self.partition,
                               "inputs": self.inputs, "changelogs": self.changelogs}
        if self.side_inputs:
            doc["side_inputs"] = self.side_inputs
        if self.topics:  # only when set, so checkpoints of jobs never rescaled read as before
            doc["topics"] = self.topics
        if self.skipped:
            doc["skipped"] = self.skipped
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "checkpoint") -> Checkpoint:
        """Decode a checkpoint record; ``where`` names its origin for errors."""
        try:
            doc: dict[str, Any] = json.loads(data)
            return cls(
                task=str(doc["task"]), partition=int(doc["partition"]),
                inputs={str(k): int(v) for k, v in doc.get("inputs", {}).items()},
                changelogs={str(k): int(v) for k, v in doc.get("changelogs", {}).items()},
                side_inputs={str(s): {str(t): int(o) for t, o in offsets.items()}
                             for s, offsets in doc.get("side_inputs", {}).items()},
                topics={str(k): str(v) for k, v in doc.get("topics", {}).items()},
                skipped={str(k): int(v) for k, v in doc.get("skipped", {}).items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{where}: not a millpond checkpoint ({exc}): {data[:200]!r}") from exc


@dataclass(frozen=True)
class StoreOffset:
    """The content of a store directory's OFFSET file."""

    store: str
    topic: str
    partition: int
    offset: int  # last changelog offset reflected in the store; NO_OFFSET if none

    def to_json(self) -> str:
        return json.dumps({"version": 1, "store": self.store, "topic": self.topic,
                           "partition": self.partition, "offset": self.offset}, sort_keys=True)


def write_offset_file(store_dir: Path, offset: StoreOffset) -> None:
    """Atomically write ``OFFSET`` in ``store_dir`` (temp file, fsync, rename, fsync dir),
    with the file mode of the store's directory (``store_dir``'s parent)."""
    mode = permissions.file_mode(permissions.mode_of(store_dir.parent))
    write_atomically(store_dir / OFFSET_FILE, offset.to_json(), mode)


def read_offset_file(store_dir: Path) -> StoreOffset | None:
    """The store's OFFSET, or None if absent. Garbage raises :class:`CheckpointError`."""
    path = store_dir / OFFSET_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{path}: unreadable OFFSET file: {exc}") from exc
    try:
        doc = json.loads(text)
        return StoreOffset(str(doc["store"]), str(doc["topic"]), int(doc["partition"]),
                           int(doc["offset"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: corrupt OFFSET file ({exc}): {text[:200]!r}") from exc


def clear_offset_file(store_dir: Path) -> None:
    """Remove ``OFFSET``: the store is about to hold writes no checkpoint describes."""
    remove_file(store_dir / OFFSET_FILE)


def read_checkpoints(
    consumer: Any, topic: str, partitions: Iterable[int] | None = None
) -> dict[str, Checkpoint]:
    """The latest checkpoint of every task in the job's checkpoint topic (empty if none),
    reading only ``partitions`` (the tasks' own) when given."""

    from millpond.kafka.reading import read_range, watermarks

    if partitions is None:
        md = consumer.list_topics(topic, timeout=30).topics.get(topic)
        partitions = sorted(md.partitions) if md is not None and md.error is None else []
    latest: dict[str, Checkpoint] = {}
    for p in partitions:
        low, high = watermarks(consumer, topic, p)
        for batch in read_range(consumer, topic, p, low, high):
            for msg in batch:
                key = (msg.key() or b"").decode()
                value = msg.value()
                if value is None:
                    latest.pop(key, None)
                else:
                    ckpt = Checkpoint.from_bytes(value, f"{topic}[{p}]@{msg.offset()} (key {key})")
                    kind, ts = msg.timestamp()
                    ckpt.timestamp_ms = ts if kind != TIMESTAMP_NOT_AVAILABLE else None
                    latest[key] = ckpt
    return latest

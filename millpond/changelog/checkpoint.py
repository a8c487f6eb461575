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
import logging
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

log = logging.getLogger(__name__)


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
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{path}: unreadable OFFSET file: {exc}") from exc
    text = data.decode("utf-8", errors="replace")
    try:
        doc = json.loads(data)  # not UTF-8 (binary garbage): a ValueError, as for text
        return StoreOffset(str(doc["store"]), str(doc["topic"]), int(doc["partition"]),
                           int(doc["offset"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: corrupt OFFSET file ({exc}): {text[:200]!r}") from exc


def clear_offset_file(store_dir: Path) -> None:
    """Remove ``OFFSET``: the store is about to hold writes no checkpoint describes."""
    remove_file(store_dir / OFFSET_FILE)


def is_task_key(key: str) -> bool:
    """Whether ``key`` names a task (``partition-N``), as every checkpoint record's key does."""
    prefix, _, number = key.rpartition("-")
    return prefix == "partition" and number.isdigit()


def drop_hint(partition: int, offset: int) -> str:
    """How to remove the record at ``offset`` of the checkpoint topic's ``partition``."""
    return (f"remove it with `millpond checkpoint drop --config ... --partition {partition} "
            f"--offset {offset}` (a tombstone with its raw key)")


@dataclass(frozen=True)
class DamagedRecord:
    """A record of the checkpoint topic that is not a checkpoint millpond can read."""

    topic: str
    partition: int
    offset: int
    key: bytes
    reason: str

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset} (key {self.key_text})"

    @property
    def key_text(self) -> str:
        try:
            return repr(self.key.decode())
        except UnicodeDecodeError:
            return f"0x{self.key.hex()}, not UTF-8"

    @property
    def task(self) -> str | None:
        """The task the record's key names, if it names one."""
        try:
            key = self.key.decode()
        except UnicodeDecodeError:
            return None
        return key if is_task_key(key) else None


def read_checkpoints(
    consumer: Any, topic: str, partitions: Iterable[int] | None = None, lenient: bool = False,
) -> dict[str, Checkpoint]:
    """The latest checkpoint of every task in the job's checkpoint topic (empty if none),
    reading only ``partitions`` (the tasks' own) when given.

    A record that is not a readable checkpoint (a key or value that is not millpond's:
    random bytes, another program's) is skipped with a WARNING naming topic, partition,
    offset and key, where that loses nothing: its key names no task, or an older checkpoint
    of the task is still in the topic (the task resumes from that one); one a newer
    checkpoint of its key replaces is skipped quietly (INFO). When it is the only checkpoint of a task the topic holds, the task's position
    is unknown: :class:`CheckpointError` names the record and the ways out, unless
    ``lenient`` (``checkpoint show|set``), which leaves the task out with the warning."""

    from millpond.kafka.reading import read_range, watermarks

    if partitions is None:
        md = consumer.list_topics(topic, timeout=30).topics.get(topic)
        partitions = sorted(md.partitions) if md is not None and md.error is None else []
    latest: dict[str, Checkpoint] = {}
    at: dict[str, str] = {}  # task -> where its latest checkpoint is
    damaged: dict[bytes, DamagedRecord] = {}  # raw key -> its newest record, if unreadable
    # Every partition's ends first: asked after a read, each waited behind the read's last
    # fetch on the broker's connection (~30 ms a partition).
    ends = {p: watermarks(consumer, topic, p) for p in partitions}
    for p, (low, high) in ends.items():
        for batch in read_range(consumer, topic, p, low, high):
            for msg in batch:
                raw = msg.key() or b""
                value = msg.value()
                try:
                    key: str | None = raw.decode()
                except UnicodeDecodeError:
                    key = None
                if value is None:  # a tombstone removes any record of its raw key
                    damaged.pop(raw, None)
                    if key is not None:
                        latest.pop(key, None)
                    continue
                offset: int = msg.offset() or 0
                where = f"{topic}[{p}]@{offset}"
                if key is None:
                    damaged[raw] = DamagedRecord(topic, p, offset, raw,
                                                 "its key is not UTF-8 (not a task name)")
                    continue
                try:
                    ckpt = Checkpoint.from_bytes(value, f"{where} (key {key})")
                except CheckpointError as exc:
                    damaged[raw] = DamagedRecord(topic, p, offset, raw, str(exc).removeprefix(
                        f"{where} (key {key}): "))
                    continue
                replaced = damaged.pop(raw, None)
                if replaced is not None:
                    log.info("checkpoint topic: skipped %s, not a millpond checkpoint: a "
                             "newer checkpoint of the key (@%d) replaces it", replaced.where,
                             offset)
                kind, ts = msg.timestamp()
                ckpt.timestamp_ms = ts if kind != TIMESTAMP_NOT_AVAILABLE else None
                latest[key] = ckpt
                at[key] = where
    for record in damaged.values():
        task = record.task
        if task is None:
            log.warning("checkpoint topic: skipped %s: %s; it is no task's checkpoint: %s",
                        record.where, record.reason,
                        drop_hint(record.partition, record.offset))
        elif task in latest:
            log.warning("checkpoint topic: skipped %s, the newest record of task %s: %s; the "
                        "task resumes from its newest readable checkpoint, %s. Write a new "
                        "one with `millpond checkpoint set --partition %s ...` to replace it",
                        record.where, task, record.reason, at[task], task.rpartition("-")[2])
        else:
            what = (f"checkpoint topic: {record.where} is the only checkpoint of task {task} "
                    f"left and unreadable ({record.reason}): the task's input "
                    "positions and store offsets are unknown")
            if not lenient:
                raise CheckpointError(
                    f"{what}. Write a valid one with `millpond checkpoint set --config ... "
                    f"--partition {task.rpartition('-')[2]} --offset TOPIC=OFFSET` (the job "
                    "stopped; `millpond status` shows each input's offsets)")
            log.warning("%s; left out", what)
    return latest


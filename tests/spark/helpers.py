"""A test job with one store: its config, changelog topic, and a Python reference of its state."""

from __future__ import annotations

import json
import random
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from millpond.changelog.checkpoint import Checkpoint, checkpoint_topic, task_name
from millpond.config import Config

STORE = "counts"
TIMEOUT = 30.0

# One changelog record as produced: (partition, offset, key, value or None for a tombstone).
Record = tuple[int, int, bytes, bytes | None]


@dataclass
class ChangelogJob:
    """A job config pointing at a fresh compacted changelog topic on the test broker."""

    bootstrap: str
    name: str
    root: Path
    partitions: int = 3
    guarantee: str = "at-least-once"
    records: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path = self.root / "job.properties"
        self.config_path.write_text(
            f"job.name={self.name}\n"
            f"job.logged.store.base.dir={self.root / 'state'}\n"
            f"task.processing.guarantee={self.guarantee}\n"
            f"systems.kafka.bootstrap.servers={self.bootstrap}\n"
            f"stores.{STORE}.factory=rocksdb\n"
            f"stores.{STORE}.key.serde=string\n"
            f"stores.{STORE}.msg.serde=json\n"
        )
        self.config = Config.load(self.config_path)
        self.topic = f"{self.name}-1-{STORE}-changelog"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = [NewTopic(self.topic, self.partitions, 1, config={"cleanup.policy": "compact"}),
                  NewTopic(self.checkpoint_topic, 1, 1, config={"cleanup.policy": "compact"})]
        for future in admin.create_topics(topics).values():
            future.result(timeout=TIMEOUT)

    @property
    def base_dir(self) -> Path:
        return self.root / "state"

    @property
    def checkpoint_topic(self) -> str:
        return checkpoint_topic(self.name, "1")

    def partition_of(self, key: bytes) -> int:
        return zlib.crc32(key) % self.partitions

    def produce(self, items: list[tuple[int, bytes, bytes | None]],
                transactional: bool = False, abort: bool = False) -> list[Record]:
        """Write (partition, key, value) records; return them with their offsets."""
        conf = {"bootstrap.servers": self.bootstrap, "linger.ms": 5}
        if transactional:
            conf["transactional.id"] = f"test-{uuid.uuid4().hex[:8]}"
        producer = Producer(conf)
        written: list[Record] = []
        errors: list[str] = []

        def delivered(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                written.append((msg.partition(), msg.offset(), msg.key(), msg.value()))  # type: ignore[attr-defined]

        if transactional:
            producer.init_transactions(TIMEOUT)
            producer.begin_transaction()
        for partition, key, value in items:
            producer.produce(self.topic, key=key, value=value, partition=partition,
                             on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(TIMEOUT) == 0  # written to the log before an abort, too
        if transactional:
            (producer.abort_transaction if abort else producer.commit_transaction)(TIMEOUT)
        assert not errors, errors
        assert len(written) == len(items)
        if not abort:
            self.records.extend(written)
        return sorted(written, key=lambda r: (r[0], r[1]))

    def write_checkpoint(self, partition: int, changelogs: dict[str, int]) -> None:
        """Write task ``partition-N``'s checkpoint record to the job's checkpoint topic."""
        producer = Producer({"bootstrap.servers": self.bootstrap})
        ckpt = Checkpoint(task_name(partition), partition, {"in": 0}, changelogs)
        producer.produce(self.checkpoint_topic, key=task_name(partition).encode(),
                         value=ckpt.to_bytes())
        assert producer.flush(TIMEOUT) == 0


def random_updates(job: ChangelogJob, n: int, keys: int, seed: int,
                   tombstone_rate: float = 0.1, start: int = 0) -> list[tuple[int, bytes, bytes | None]]:
    """``n`` updates of ``keys`` string keys with JSON object values and some tombstones.

    The key ``shared`` is written to every partition, with different values: state is per
    (partition, key), never per key alone.
    """
    rng = random.Random(seed)
    items: list[tuple[int, bytes, bytes | None]] = []
    for i in range(start, start + n):
        key = f"user-{rng.randrange(keys)}".encode()
        value = None if rng.random() < tombstone_rate else json.dumps(
            {"seq": i, "name": f"n{i % 7}", "score": i * 1.5}).encode()
        items.append((job.partition_of(key), key, value))
        if i % 50 == 0:
            p = i % job.partitions
            items.append((p, b"shared", json.dumps({"seq": i, "name": f"p{p}", "score": 0.5}).encode()))
    return items


def reference(records: list[Record], ends: dict[int, int] | None = None) -> dict[tuple[int, bytes], tuple[bytes, int]]:
    """The store's state from ``records``: (partition, key) -> (value, offset) of the last
    record before ``ends[partition]`` (exclusive), tombstones removing keys."""
    state: dict[tuple[int, bytes], tuple[bytes, int]] = {}
    for partition, offset, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        if ends is not None and offset >= ends.get(partition, 0):
            continue
        if value is None:
            state.pop((partition, key), None)
        else:
            state[(partition, key)] = (value, offset)
    return state


def wait_for(condition: object, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``condition()`` until true; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")

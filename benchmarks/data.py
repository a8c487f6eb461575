"""The benchmark input and the raw client ceilings: produce and consume with confluent-kafka.

Every system counts the same topic: JSON page views of ~100 bytes, keyed by ``user_id``,
partitioned by the user number modulo the partition count (so state is local per task).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millpond.changelog.restore import FETCH_QUEUE_BACKOFF_MS

PRODUCER_CONF: dict[str, Any] = {"linger.ms": 20, "batch.size": 1_000_000,
                                 "queue.buffering.max.messages": 1_000_000,
                                 "queue.buffering.max.kbytes": 1_048_576,
                                 "compression.type": "none"}


@dataclass
class Dataset:
    """The input records, generated once in memory (so producing them times only the client)."""

    messages: int
    users: int
    partitions: int
    records: list[tuple[bytes, bytes, int]]  # (key, value, partition)

    @property
    def payload_bytes(self) -> int:
        return sum(len(k) + len(v) for k, v, _ in self.records)

    def reference(self) -> dict[str, int]:
        """The exact count per user: what every system's final state must equal."""
        counts: Counter[str] = Counter()
        for key, _, _ in self.records:
            counts[key.decode()] += 1
        return dict(counts)


def user_of(i: int, users: int) -> int:
    """A fixed permutation walk: every user gets messages/users messages, interleaved."""
    return (i * 7919) % users


def make_dataset(messages: int, users: int, partitions: int) -> Dataset:
    pages = ["/", "/products", "/cart", "/checkout", "/search", "/account", "/help"]
    records = []
    ts0 = 1_700_000_000_000
    for i in range(messages):
        u = user_of(i, users)
        user = f"user-{u:06d}"
        value = json.dumps({"user_id": user, "page": pages[i % len(pages)], "ts": ts0 + i,
                            "session": f"s-{(i * 31) % 999_983:06d}", "seq": i},
                           separators=(",", ":"))
        records.append((user.encode(), value.encode(), u % partitions))
    return Dataset(messages, users, partitions, records)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, **config: str) -> None:
    client = admin(bootstrap)  # keep the client alive until the futures resolve
    futures = client.create_topics([NewTopic(name, partitions, 1, config=config)])
    futures[name].result(timeout=60)


def delete_topics(bootstrap: str, names: Iterable[str]) -> None:
    names = list(names)
    if not names:
        return
    client = admin(bootstrap)
    futures = client.delete_topics(names, operation_timeout=30)
    for f in futures.values():
        try:
            f.result(timeout=60)
        except Exception:
            pass  # already gone


def list_topics(bootstrap: str) -> list[str]:
    return sorted(admin(bootstrap).list_topics(timeout=30).topics)


def produce(bootstrap: str, topic: str, data: Dataset) -> dict[str, float]:
    """Produce every record of ``data`` to ``topic`` and wait for delivery; returns the rate."""
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF})
    produce_ = producer.produce
    poll = producer.poll
    began = time.perf_counter()
    for n, (key, value, partition) in enumerate(data.records):
        while True:
            try:
                produce_(topic, value, key, partition)
                break
            except BufferError:
                poll(0.05)
        if n % 10_000 == 0:
            poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - began
    if left:
        raise RuntimeError(f"{left} records to {topic} were not delivered")
    return {"seconds": elapsed, "msgs_per_s": data.messages / elapsed,
            "mb_per_s": data.payload_bytes / 1e6 / elapsed}


def consume_all(bootstrap: str, topic: str, *, decode_json: bool = False,
                isolation: str = "read_uncommitted") -> dict[str, Any]:
    """Read every record of ``topic`` from the beginning to its end with one consumer.

    The raw consume ceiling: batches of 1000 through ``Consumer.consume``, touching each
    record's value (and with ``decode_json`` parsing it), like a task loop does minimally.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation,
                         # As millpond's consumers: librdkafka's 1 s default would cap this
                         # "ceiling" at ~160k msg/s here.
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    md = consumer.list_topics(topic, timeout=30).topics[topic]
    parts = [TopicPartition(topic, p, 0) for p in md.partitions]
    remaining = {p.partition for p in parts}
    count = nbytes = 0
    loads = json.loads
    began = None
    consumer.assign(parts)
    deadline = time.monotonic() + 600
    try:
        while remaining and time.monotonic() < deadline:
            msgs = consumer.consume(1000, 0.5)
            if began is None and msgs:
                began = time.perf_counter()
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        remaining.discard(msg.partition())
                        continue
                    raise RuntimeError(msg.error().str())
                value = msg.value()
                nbytes += len(value or b"") + len(msg.key() or b"")
                if decode_json and value is not None:
                    loads(value)
                count += 1
        ended = time.perf_counter()
    finally:
        consumer.close()
    if remaining:
        raise RuntimeError(f"did not reach the end of {topic} partitions {sorted(remaining)}")
    elapsed = ended - (began or ended)
    return {"records": count, "bytes": nbytes, "seconds": elapsed,
            "msgs_per_s": count / elapsed if elapsed else 0.0,
            "mb_per_s": nbytes / 1e6 / elapsed if elapsed else 0.0}


def topic_records(bootstrap: str, topic: str) -> int:
    """High minus low watermark summed over partitions (records, including compaction gaps)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        md = consumer.list_topics(topic, timeout=30).topics[topic]
        total = 0
        for p in md.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


def topic_size(bootstrap: str, topic: str) -> dict[str, int]:
    """Records and key+value bytes of ``topic`` as they are now (reads it whole)."""
    out = consume_all(bootstrap, topic)
    return {"records": out["records"], "bytes": out["bytes"]}


def large_changelog(records: int, keys: int, value_bytes: int, partitions: int) -> Dataset:
    """A synthetic store changelog: ``records`` writes over ``keys`` string keys, each value
    ``value_bytes`` of printable text; a key's partition is its number modulo ``partitions``."""
    out = []
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    for i in range(records):
        k = (i * 7919) % keys
        stem = f"{i:012d}-{k:08d}-"
        filler = alphabet[i % 36] * (value_bytes - len(stem))
        out.append((f"key-{k:08d}".encode(), (stem + filler).encode(), k % partitions))
    return Dataset(records, keys, partitions, out)


def final_values(data: Dataset) -> dict[str, str]:
    """The last value written per key (what a restored store must hold)."""
    return {k.decode(): v.decode() for k, v, _ in data.records}

"""The benchmark input and the raw client ceilings: produce and consume with confluent-kafka.

Every system counts the same topic: JSON page views of ~100 bytes, keyed by ``user_id``,
partitioned by the user number modulo the partition count (so state is local per task).
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS

# Idempotence keeps each partition in produce order when a request is retried: without it a
# retried batch can land after a later one, and a key's older value then ends a synthetic
# changelog that the restore check expects to end with the newer one.
PRODUCER_CONF: dict[str, Any] = {"linger.ms": 20, "batch.size": 1_000_000,
                                 "queue.buffering.max.messages": 1_000_000,
                                 "queue.buffering.max.kbytes": 1_048_576,
                                 "compression.type": "none", "enable.idempotence": True}


@dataclass
class Dataset:
    """The input records, generated once in memory (so producing them times only the client)."""

    messages: int
    users: int
    partitions: int
    records: list[tuple[bytes, bytes, int]]  # (key, value, partition)
    zipf: float | None = None  # the Zipf exponent of the keys; None: uniform
    seed: int | None = None  # the seed of the Zipf draw

    @property
    def payload_bytes(self) -> int:
        return sum(len(k) + len(v) for k, v, _ in self.records)

    def reference(self) -> dict[str, int]:
        """The exact count per user: what every system's final state must equal."""
        counts: Counter[bytes] = Counter(key for key, _, _ in self.records)
        return {k.decode(): n for k, n in counts.items()}

    def describe(self, reference: dict[str, int] | None = None) -> dict[str, Any]:
        """Sizes and, for skewed keys, how skewed: distinct users, hottest user's share."""
        ref = reference if reference is not None else self.reference()
        top = sorted(ref.values(), reverse=True)
        per_partition = [0] * self.partitions
        for _, _, p in self.records:
            per_partition[p] += 1
        return {"messages": self.messages, "users": self.users, "partitions": self.partitions,
                "key_distribution": f"zipf {self.zipf}" if self.zipf else "uniform",
                "zipf_exponent": self.zipf, "seed": self.seed,
                "distinct_users": len(ref),
                "hottest_user_share": top[0] / self.messages if top else None,
                "top_100_users_share": sum(top[:100]) / self.messages if top else None,
                "messages_per_partition": per_partition,
                "payload_bytes": self.payload_bytes,
                "avg_value_bytes": round(sum(len(v) for _, v, _ in self.records)
                                         / max(1, self.messages), 1)}


PERMUTE = 7919  # a prime: i * PERMUTE % users walks every user when users is not a multiple


def _multiplier(users: int) -> int:
    return PERMUTE if users % PERMUTE else 104_729  # another prime


def user_of(i: int, users: int) -> int:
    """A fixed permutation walk: every user gets messages/users messages, interleaved."""
    return (i * 7919) % users


def zipf_users(messages: int, users: int, exponent: float, seed: int) -> list[int]:
    """``messages`` user numbers drawn from a Zipf law over ``users`` ranks, deterministically.

    Rank r (1-based) has weight r ** -exponent; the draw is ``random.Random(seed).choices``
    over the cumulative weights (a bisect per message), so the same arguments give the same
    keys on any machine. Ranks map to user numbers through a fixed permutation, so the hot
    users are spread over the number space (and so over the partitions) rather than being
    users 0, 1, 2, ...
    """
    cum = list(itertools.accumulate(r ** -exponent for r in range(1, users + 1)))
    ranks = random.Random(seed).choices(range(users), cum_weights=cum, k=messages)
    mult = _multiplier(users)
    return [(r * mult) % users for r in ranks]


PAGES = ("/", "/products", "/cart", "/checkout", "/search", "/account", "/help")
TS0 = 1_700_000_000_000


def page_view(i: int, user: str, ts: int | None = None) -> str:
    """Message ``i`` as compact JSON (the bytes ``json.dumps(..., separators=(",", ":"))``
    gives; formatted directly, ~5x faster). ``ts``: its event time in ms (default
    ``TS0 + i``)."""
    return (f'{{"user_id":"{user}","page":"{PAGES[i % 7]}","ts":{TS0 + i if ts is None else ts},'
            f'"session":"s-{(i * 31) % 999_983:06d}","seq":{i}}}')


def make_dataset(messages: int, users: int, partitions: int, *, zipf: float | None = None,
                 seed: int = 14, span_ms: int | None = None) -> Dataset:
    """JSON page views keyed by ``user_id``: users in a fixed interleaved walk (uniform: every
    user gets messages/users of them), or drawn from a Zipf law with exponent ``zipf``.
    ``span_ms``: the values' ``ts`` go from TS0 to TS0 + span_ms in message order (message i
    at ``TS0 + i * span_ms // messages``; default: ``TS0 + i``, one ms a message)."""
    picks: Iterable[int] = (zipf_users(messages, users, zipf, seed) if zipf
                            else ((i * 7919) % users for i in range(messages)))
    names: dict[int, tuple[str, bytes]] = {}  # a user's key is made once
    records: list[tuple[bytes, bytes, int]] = []
    append = records.append
    for i, u in enumerate(picks):
        name = names.get(u)
        if name is None:
            user = f"user-{u:06d}"
            name = names[u] = (user, user.encode())
        ts = None if span_ms is None else TS0 + i * span_ms // messages
        append((name[1], page_view(i, name[0], ts).encode(), u % partitions))
    return Dataset(messages, users, partitions, records, zipf, seed if zipf else None)


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
    record's value, like a task loop does minimally. With ``decode_json`` each value is also
    parsed with ``orjson.loads``, the decoder of millpond's json serde
    (millpond/serdes/builtins.py): the consume + JSON-decode ceiling.
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
    loads = orjson.loads
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



def read_records(bootstrap: str, topic: str,
                 isolation: str = "read_committed") -> list[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic`` as ``(key, value)``, partition by partition in offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-rd-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation,
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    out: list[tuple[bytes | None, bytes | None]] = []
    try:
        md = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        remaining = set(md.partitions)
        deadline = time.monotonic() + 600
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        remaining.discard(msg.partition())
                        continue
                    raise RuntimeError(msg.error().str())
                out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    if remaining:
        raise RuntimeError(f"did not reach the end of {topic} partitions {sorted(remaining)}")
    return out


def timestamps(bootstrap: str, topic: str) -> list[float]:
    """Every record's timestamp (seconds; CreateTime: when its writer sent it, or on a
    LogAppendTime topic when the broker appended it) in ``topic``,
    sorted. Read read_uncommitted; a finished run's records were all committed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-ts-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    out: list[float] = []
    try:
        md = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([TopicPartition(topic, p, 0) for p in md.partitions])
        remaining = set(md.partitions)
        deadline = time.monotonic() + 600
        while remaining and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        remaining.discard(msg.partition())
                    continue
                out.append(msg.timestamp()[1] / 1000.0)
    finally:
        consumer.close()
    out.sort()
    return out

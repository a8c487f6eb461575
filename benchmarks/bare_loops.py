"""Bare loops over the libraries millpond uses, on one topic of the count's input: the lower
bound of a Python stateful count with millpond's shape (issue #14's blocked note).

``python -m benchmarks.bare_loops TOPIC [--bootstrap B] [--rounds N]`` on a topic of page views
(e.g. one made by ``benchmarks.data``), after one uncounted warm-up pass, rounds in
alternating order:

* ``ceiling``: consume(1000) batches + ``orjson.loads`` of each value (the bench's ceiling);
* ``dict``: + key decode + a count in a plain dict (no envelope, no store, no commit);
* ``task``: + one envelope object per message (7 slots) + ``task.process(envelope)`` calling
  ``get``/``put`` of a one-layer Python store (a dict and a dirty set): the StreamTask shape;
* ``task+writedown``: + one write-down at the end (every dirty key serialized, one RocksDB
  WriteBatch, one changelog record each), as a single commit would.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rocksdict import Rdict, WriteBatch

VARIANTS = ("ceiling", "dict", "task", "task+writedown")


class Envelope:
    """The fields of millpond's IncomingMessageEnvelope, nothing else."""

    __slots__ = ("stream", "partition", "offset", "key", "message", "timestamp", "headers")

    def __init__(self, stream: Any, partition: Any, offset: Any, key: Any, message: Any,
                 timestamp: Any, headers: Any) -> None:
        self.stream = stream
        self.partition = partition
        self.offset = offset
        self.key = key
        self.message = message
        self.timestamp = timestamp
        self.headers = headers


class Store:
    """One Python layer over a dict, with a dirty set for write-back."""

    def __init__(self) -> None:
        self.cache: dict[str, int] = {}
        self.dirty: dict[str, None] = {}

    def get(self, key: str) -> int | None:
        return self.cache.get(key)

    def put(self, key: str, value: int) -> None:
        self.cache[key] = value
        self.dirty[key] = None


class Task:
    def __init__(self) -> None:
        self.counts = Store()

    def process(self, envelope: Envelope) -> None:
        user = envelope.message["user_id"]
        self.counts.put(user, (self.counts.get(user) or 0) + 1)


def run(bootstrap: str, topic: str, changelog: str, variant: str) -> float:
    """One pass over ``topic``; msg/s from the first message to the end (write-down included)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.queue.backoff.ms": 20})
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    parts = [TopicPartition(topic, p, 0) for p in meta.partitions]
    remaining = {p.partition for p in parts}
    consumer.assign(parts)
    loads = orjson.loads
    counts: dict[str, int] = {}
    task = Task()
    process = task.process
    n = 0
    began = None
    deadline = time.monotonic() + 600
    while remaining and time.monotonic() < deadline:
        msgs = consumer.consume(1000, 0.5)
        if began is None and msgs:
            began = time.perf_counter()
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition())  # type: ignore[arg-type]
                    continue
                raise RuntimeError(err.str())
            if variant == "ceiling":
                loads(msg.value())  # type: ignore[arg-type]
            elif variant == "dict":
                user = loads(msg.value())["user_id"]  # type: ignore[arg-type]
                msg.key().decode()  # type: ignore[union-attr]
                counts[user] = counts.get(user, 0) + 1
            else:
                process(Envelope(msg.topic(), msg.partition(), msg.offset(),
                                 msg.key().decode(),  # type: ignore[union-attr]
                                 loads(msg.value()),  # type: ignore[arg-type]
                                 msg.timestamp()[1], msg.headers() or ()))
            n += 1
    if variant == "task+writedown":
        path = tempfile.mkdtemp(prefix="bare-loops-")
        db = Rdict(path)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        batch = WriteBatch()
        dumps = orjson.dumps
        cache = task.counts.cache
        for key in task.counts.dirty:
            kb, vb = key.encode(), dumps(cache[key])
            batch.put(kb, vb)
            producer.produce(changelog, vb, kb, 0)
            producer.poll(0)
        db.write(batch)
        if producer.flush(60):
            raise RuntimeError("changelog records were not delivered")
        db.close()
        shutil.rmtree(path, ignore_errors=True)
    ended = time.perf_counter()
    consumer.close()
    if remaining or began is None:
        raise RuntimeError(f"did not read {topic} to its end")
    return n / (ended - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    changelog = f"bare-loops-changelog-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(changelog, 1, 1)])[changelog].result(timeout=60)
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        # A first pass over a topic runs at half speed (cold broker reads): not counted.
        run(args.bootstrap, args.topic, changelog, "ceiling")
        for r in range(args.rounds):
            for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                rates[variant].append(run(args.bootstrap, args.topic, changelog, variant))
                print(f"round {r + 1} {variant:16s} {rates[variant][-1]:>10,.0f} msg/s",
                      flush=True)
    finally:
        admin.delete_topics([changelog])[changelog].result(timeout=60)
    ceiling = statistics.median(rates["ceiling"])
    for variant in VARIANTS:
        median = statistics.median(rates[variant])
        print(f"median {variant:16s} {median:>10,.0f} msg/s ({median / ceiling:.0%} of ceiling)")


if __name__ == "__main__":
    main()

"""A bare loop over the same libraries as the hop apps: what a repartition hop costs with
nothing of millpond's runtime around it.

One-stage: consume the input, decode it (orjson), keep the records ``benchmarks.jobs.keep``
keeps, count them per record key in a dict and produce each new count (JSON) to an output
topic. Two-stage: the same filter, then each kept record re-keyed by ``benchmarks.jobs.user_of``
and produced (JSON) to an intermediate topic of the input's partition count, which the same
consumer also reads (as a job's tasks read an internal topic in the same process), decodes
and counts; each new count produced to the output. No transactions, no changelog, no commits,
read_uncommitted: the cheapest form of either app. The hop's cost is 1 - two-stage msg/s /
one-stage msg/s, input messages over first message -> the last count's delivery. Needs a
broker and the benchmark's input topic:

    .venv/bin/python -m benchmarks.bare_hop TOPIC [--bootstrap 127.0.0.1:9092] [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from benchmarks.data import create_topic, delete_topics, topic_records
from benchmarks.jobs import keep, user_of
from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS


def _topic(bootstrap: str, partitions: int) -> str:
    """A new scratch topic of ``partitions``."""
    name = f"millpond-bare-hop-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, partitions)
    return name


def run(bootstrap: str, topic: str, two_stage: bool, timeout_s: float = 600) -> dict[str, Any]:
    """One bare run of the one- or two-stage app over ``topic``; its rate and counts."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-hop-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    output = _topic(bootstrap, len(parts))
    middle = _topic(bootstrap, len(parts)) if two_stage else None
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    assigned = [TopicPartition(topic, p, 0) for p in parts]
    if middle is not None:
        assigned += [TopicPartition(middle, p, 0) for p in parts]
    consumer.assign(assigned)
    loads, dumps, produce = orjson.loads, orjson.dumps, producer.produce
    counts: dict[str, int] = {}
    kept = sent = 0
    at_end: set[int] = set()  # input partitions read to their end
    began = None
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msgs = consumer.consume(1000, 0.05)
            if began is None and msgs:
                began = time.perf_counter()
            for msg in msgs:
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:  # type: ignore[union-attr]
                        if msg.topic() == topic:
                            at_end.add(msg.partition())  # type: ignore[arg-type]
                        continue
                    raise RuntimeError(msg.error().str())  # type: ignore[union-attr]
                value = loads(msg.value())  # type: ignore[arg-type]
                if msg.topic() == topic:
                    if not keep(value):
                        continue
                    kept += 1
                    if middle is not None:
                        produce(middle, dumps(value), user_of(value).encode())
                        continue
                key = msg.key().decode()  # type: ignore[union-attr]
                n = counts[key] = counts.get(key, 0) + 1
                produce(output, dumps(n), key.encode())
                sent += 1
            producer.poll(0)
            if len(at_end) == len(parts) and sent == kept:
                break
        producer.flush(60)
        ended = time.perf_counter()
    finally:
        consumer.close()
        delete_topics(bootstrap, [t for t in (output, middle) if t])
    records = sum(counts.values())
    elapsed = ended - (began or ended)
    return {"app": "two-stage" if two_stage else "one-stage", "kept": kept, "counted": records,
            "outputs": sent, "seconds": elapsed, "complete": sent == kept and records == kept}


def pair(bootstrap: str, topic: str, messages: int,
         order: tuple[bool, ...] = (False, True)) -> dict[str, Any]:
    """Both apps over ``topic`` (``messages`` records; ``order``: two_stage flags, one-stage
    first by default): each run's result with its msg/s, and ``hop_cost``, 1 - two-stage
    msg/s / one-stage msg/s."""
    out: dict[str, Any] = {}
    for two in order:
        res = run(bootstrap, topic, two)
        res["msgs_per_s"] = messages / res["seconds"] if res["seconds"] else 0.0
        out[res["app"]] = res
    one, two_ = out["one-stage"]["msgs_per_s"], out["two-stage"]["msgs_per_s"]
    out["hop_cost"] = 1 - two_ / one if one else None
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("topic")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--runs", type=int, default=2)
    a = p.parse_args()
    total = topic_records(a.bootstrap, a.topic)
    for r in range(a.runs):  # odd rounds run the two-stage app first
        res = pair(a.bootstrap, a.topic, total, (False, True) if r % 2 == 0 else (True, False))
        for app in ("one-stage", "two-stage"):
            print(json.dumps(res[app]), flush=True)
        print(f"round {r + 1}: hop cost {res['hop_cost']:.0%}", flush=True)


if __name__ == "__main__":
    main()

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
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.jobs import keep, user_of
from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS


def _topic(bootstrap: str, partitions: int) -> str:
    name = f"millpond-bare-hop-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _delete(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.delete_topics(names).values():
        try:
            f.result(30)
        except Exception:  # noqa: BLE001 - a scratch topic left behind is harmless here
            pass


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
                else:
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
        _delete(bootstrap, [t for t in (output, middle) if t])
    records = sum(counts.values())
    elapsed = ended - (began or ended)
    return {"app": "two-stage" if two_stage else "one-stage", "kept": kept, "counted": records,
            "outputs": sent, "seconds": elapsed, "complete": sent == kept and records == kept}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("topic")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--runs", type=int, default=2)
    a = p.parse_args()
    consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": "bare-hop-size"})
    parts = consumer.list_topics(a.topic, timeout=30).topics[a.topic].partitions
    total = 0
    for part in parts:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(a.topic, part), timeout=30)
        total += hi - lo
    consumer.close()
    out = []
    for r in range(a.runs):
        pair = []
        for two in ((False, True) if r % 2 == 0 else (True, False)):
            res = run(a.bootstrap, a.topic, two)
            res["msgs_per_s"] = total / res["seconds"] if res["seconds"] else 0.0
            pair.append(res)
            print(json.dumps(res), flush=True)
        one, two_ = sorted(pair, key=lambda x: x["app"])
        out.append(1 - two_["msgs_per_s"] / one["msgs_per_s"])
        print(f"round {r + 1}: hop cost {out[-1]:.0%}", flush=True)


if __name__ == "__main__":
    main()

"""A bare confluent-kafka loop: what a cooperative rebalance costs the partitions that stay.

Consumer A holds a 4-partition topic fed at 5,000 msg/s (``cooperative-sticky``, 500 ms
heartbeats, as millpond's group consumer); 8 s in, consumer B (another process) joins and
takes two partitions. Printed: A's worst latency (receive time - the record's produce time)
of the partitions it keeps, in the 6 s after B started, beside its worst in the 4 s before.

``--sleep-in-callback S`` makes A's revocation callback take S seconds before it unassigns
(as a commit inside it would); ``--sleep-after S`` does the same work after the poll that ran
the callback returned. With librdkafka 2.16 a callback of more than ~1-2 ms left the kept
partitions unfetched for ~0.6 s (its fetcher thread handles the pause the callback runs
under and misses the resume at the unassign); an instant callback raced it and lost now and
then (issue #39; benchmarks/results.md). Needs a broker:

    .venv/bin/python -m benchmarks.bare_rebalance [--bootstrap 127.0.0.1:9092]
        [--sleep-in-callback 0.03 | --sleep-after 0.08]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RATE = 5000
PARTITIONS = 4


def _group_conf(bootstrap: str, group: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "heartbeat.interval.ms": 500, "session.timeout.ms": 10000,
            "enable.auto.commit": False, "fetch.queue.backoff.ms": 20,
            "auto.offset.reset": "latest"}


def _member_b(bootstrap: str, group: str, topic: str, seconds: float) -> None:
    consumer = Consumer(_group_conf(bootstrap, group))
    consumer.subscribe([topic])
    end = time.time() + seconds
    while time.time() < end:
        consumer.consume(1000, 0.05)
    consumer.close()


def _feed(producer: Producer, topic: str, stop: threading.Event) -> None:
    i, began = 0, time.perf_counter()
    while not stop.is_set():
        due = began + i / RATE
        now = time.perf_counter()
        if now < due:
            producer.poll(0)
            time.sleep(due - now)
        producer.produce(topic, json.dumps({"ts": time.time() * 1000}).encode(),
                         partition=i % PARTITIONS)
        i += 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--sleep-in-callback", type=float, default=0.0)
    p.add_argument("--sleep-after", type=float, default=0.0)
    p.add_argument("--member-b", nargs=3, metavar=("GROUP", "TOPIC", "SECONDS"),
                   help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.member_b:
        _member_b(a.bootstrap, a.member_b[0], a.member_b[1], float(a.member_b[2]))
        return 0
    topic = f"bare-rebalance-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    stop = threading.Event()
    threading.Thread(target=_feed, args=(producer, topic, stop), daemon=True).start()
    revoked: list[int] = []
    pending: list[bool] = []

    def on_revoke(consumer: Consumer, parts: list[TopicPartition]) -> None:
        if not revoked:
            revoked.extend(tp.partition for tp in parts)
        if a.sleep_in_callback:
            time.sleep(a.sleep_in_callback)
        consumer.incremental_unassign(parts)
        pending.append(True)

    consumer = Consumer(_group_conf(a.bootstrap, f"g-{topic}"))
    consumer.subscribe([topic], on_revoke=on_revoke)
    seen: list[tuple[float, int, float]] = []  # (received, partition, latency ms)
    began, joined, member_b = time.time(), 0.0, None
    while time.time() - began < 20:
        if member_b is None and time.time() - began > 8:
            joined = time.time()
            member_b = subprocess.Popen([sys.executable, "-m", "benchmarks.bare_rebalance",
                                         "--bootstrap", a.bootstrap, "--member-b",
                                         f"g-{topic}", topic, "12"])
        batch = consumer.consume(1000, 0.05)
        if pending and a.sleep_after:
            pending.clear()
            time.sleep(a.sleep_after)
        for msg in batch:
            if msg.error() is None:
                now = time.time() * 1000
                seen.append((now / 1000, msg.partition() or 0,
                             now - json.loads(msg.value() or b"{}")["ts"]))
    stop.set()
    consumer.close()
    if member_b is not None:
        member_b.wait(timeout=60)
    kept = [lat for at, part, lat in seen if joined <= at < joined + 6 and part not in revoked]
    before = [lat for at, _, lat in seen if joined - 4 <= at < joined]
    print(f"callback sleep {a.sleep_in_callback * 1000:g} ms, after {a.sleep_after * 1000:g} ms:"
          f" revoked {sorted(revoked)}; worst before {max(before, default=0):.0f} ms, kept "
          f"partitions' worst after the join {max(kept, default=0):.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

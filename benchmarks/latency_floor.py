"""The latency workload's floor: its keyed count as a bare confluent-kafka loop.

``python -m benchmarks.latency_floor <bootstrap> <input> <output> <group>`` consumes what is
ready (else waits for the next record), counts each user in a dict and produces one output
per input, ``{"user", "count", "ts_ms", "seq"}`` keyed by the user, with the client settings
millpond's own consumer and output producer use (``fetch.queue.backoff.ms``,
``linger.ms``); no store, no changelog, no commit beyond the consumer's auto-commit. Its
latency row (at-least-once) is what the client, the broker and the machine give on their
own in the same run: a millpond row is read against it. SIGTERM ends it after a flush.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer

from millpond.kafka.producer import LINGER_MS
from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS

POLL_BATCH = 1000
WAIT_S = 0.1


def main(bootstrap: str, topic: str, output: str, group: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True,
                         "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS,
                         "enable.idempotence": True})
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer.subscribe([topic])
    counts: dict[str, int] = {}
    loads, dumps, produce = orjson.loads, orjson.dumps, producer.produce
    try:
        while not stopping:
            msgs = consumer.consume(POLL_BATCH, 0) or consumer.consume(1, WAIT_S)
            for msg in msgs:
                if msg.error() is not None:
                    continue
                v: Any = loads(msg.value() or b"null")
                user = v["user_id"]
                n = counts.get(user, 0) + 1
                counts[user] = n
                produce(output, dumps({"user": user, "count": n, "ts_ms": v["ts_ms"],
                                       "seq": v["seq"]}), user.encode())
            producer.poll(0)
    finally:
        left = producer.flush(30)
        consumer.close()
    if left:
        sys.exit(f"{left} outputs were not delivered")


if __name__ == "__main__":
    main(*sys.argv[1:5])

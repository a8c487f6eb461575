"""Placeholder demo: round-trips messages through the local broker.

Replaced by the windowed-aggregation recovery demo (examples issue).
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BOOTSTRAP = "127.0.0.1:9092"


def main() -> None:
    topic = f"millpond-demo-{uuid.uuid4().hex[:6]}"
    AdminClient({"bootstrap.servers": BOOTSTRAP}).create_topics(
        [NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": BOOTSTRAP})
    for i in range(10):
        producer.produce(topic, key=str(i), value=f"hello {i}")
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": topic})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    print(f"demo: {'PASS' if len(got) == 10 else 'FAIL'} ({len(got)}/10 messages round-tripped)")


if __name__ == "__main__":
    main()

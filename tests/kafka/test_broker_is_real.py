"""The broker the suite runs against is a real Kafka: compaction and transactions work."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.kafka


def _create(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)])
    futures[name].result(timeout=30)


def _read_all(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list[tuple]:
    """Read a whole single-partition topic from the beginning to its end offset."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
        "enable.auto.commit": False, "isolation.level": isolation,
        "enable.partition.eof": True,
    })
    tp = TopicPartition(topic, 0, 0)
    consumer.assign([tp])
    out: list[tuple] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"did not reach the end of {topic} in 30s")
    finally:
        consumer.close()


def test_log_cleaner_compacts_superseded_records(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topic = topic_name("compact")
    _create(kafka_bootstrap, topic, **{
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "100",
    })
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for round_ in range(5):
        for key in ("a", "b", "c"):
            producer.produce(topic, key=key, value=f"{key}{round_}")
    assert producer.flush(30) == 0
    written = _read_all(kafka_bootstrap, topic)
    assert len(written) == 15

    # The active segment is never cleaned: wait past segment.ms and append once more to roll.
    time.sleep(0.5)
    producer.produce(topic, key="z", value="roll")
    assert producer.flush(30) == 0

    deadline = time.monotonic() + 60
    seen = written
    while time.monotonic() < deadline:
        seen = _read_all(kafka_bootstrap, topic)
        if len(seen) < 16:
            break
        time.sleep(1)
    latest = {k: v for _, k, v in seen}
    assert latest == {b"a": b"a4", b"b": b"b4", b"c": b"c4", b"z": b"roll"}
    assert len(seen) == 4, f"cleaner left superseded records: {seen}"
    assert [o for o, _, _ in seen] == [12, 13, 14, 15], "offsets survive compaction unchanged"


def test_transaction_commit_and_abort_visibility(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    _create(kafka_bootstrap, source)
    _create(kafka_bootstrap, sink)
    plain = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(4):
        plain.produce(source, key=str(i), value=f"v{i}")
    assert plain.flush(30) == 0

    group = topic_name("group")
    consumer = Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": group,
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    consumer.assign([TopicPartition(source, 0, 0)])
    producer = Producer({
        "bootstrap.servers": kafka_bootstrap, "transactional.id": topic_name("txn"),
        "transaction.timeout.ms": 30000, "message.timeout.ms": 20000,
    })
    producer.init_transactions(30)

    def process_batch(count: int, commit: bool) -> None:
        producer.begin_transaction()
        got = 0
        deadline = time.monotonic() + 30
        while got < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue
            producer.produce(sink, key=msg.key(), value=msg.value().upper())
            got += 1
        assert got == count
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        if commit:
            producer.commit_transaction(30)
        else:
            # Delivered first: abort_transaction purges records still in the producer's
            # queue, and this test wants them in the log (hidden by the abort marker).
            assert producer.flush(30) == 0
            producer.abort_transaction(30)

    try:
        process_batch(2, commit=True)
        process_batch(2, commit=False)
        committed = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert committed[0].offset == 2, "aborted offsets must not be committed"
    finally:
        consumer.close()

    visible = [(k, v) for _, k, v in _read_all(kafka_bootstrap, sink, "read_committed")]
    assert visible == [(b"0", b"V0"), (b"1", b"V1")]
    everything = _read_all(kafka_bootstrap, sink, "read_uncommitted")
    assert len(everything) == 4, "the aborted records are in the log, hidden by read_committed"


def test_local_broker_restarts_on_its_data_dir(own_broker: Any) -> None:
    """Stop and start keep the data dir (and its topics): what broker-restart faults rely on."""
    broker = own_broker
    _create(broker.bootstrap, "survives-restart", 2)
    assert broker.stop()
    assert not broker.status().running
    broker.start(timeout=120)
    assert broker.status().running
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=30).topics
    assert len(topics["survives-restart"].partitions) == 2


def test_topics_keep_old_timestamps_unless_they_set_retention(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    """Results are timestamped with event times (the tests' are in 1970, the examples' in
    2024): a topic without its own retention.ms keeps them (the dev broker's log.retention.ms
    is -1), one that sets it keeps its own."""
    from confluent_kafka.admin import ConfigResource

    plain, own = topic_name("plain"), topic_name("own")
    _create(kafka_bootstrap, plain)
    _create(kafka_bootstrap, own, **{"retention.ms": "3600000"})
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in (plain, own)]
    found = {r.name: c["retention.ms"].value
             for r, f in admin.describe_configs(resources).items()
             for c in [f.result(timeout=30)]}
    assert found == {plain: "-1", own: "3600000"}

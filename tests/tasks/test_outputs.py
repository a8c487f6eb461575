"""Output topics against a real broker (auto-creation off): created on first send, or refused
at once with the topic's name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from millpond.changelog.checkpoint import checkpoint_topic
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    latest_by_key,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka


def _partitions(bootstrap: str, topic: str) -> int | None:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    entry = md.topics.get(topic)
    return None if entry is None or entry.error is not None else len(entry.partitions)


def _replicas(bootstrap: str, topic: str) -> set[int]:
    """The replica counts of ``topic``'s partitions."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {len(p.replicas) for p in md.topics[topic].partitions.values()}


@pytest.mark.parametrize(("brokers", "asked"), [(2, 2), (3, 3), (7, 3)])
def test_a_created_output_topic_asks_for_min_3_brokers_replicas(
    brokers: int, asked: int, kafka_bootstrap: str, topic_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replication an output topic is created with is min(3, brokers), as a changelog's
    default: with the broker count the job sees made larger than the real cluster's one
    broker, the real broker refuses the creation naming the replication asked for, and the
    first send's error names the topic (one broker: created, see the test below)."""
    from millpond.kafka.admin import OutputTopics, TopicAdmin
    from millpond.kafka.errors import OutputTopicError

    monkeypatch.setattr(TopicAdmin, "broker_count", lambda self: brokers)
    sink = topic_name("out")
    outputs = OutputTopics(TopicAdmin({"bootstrap.servers": kafka_bootstrap}), 2,
                           kafka_bootstrap)
    with pytest.raises(OutputTopicError) as info:
        outputs.ensure(sink)
    assert f"output topic {sink} does not exist and could not be created" in str(info.value)
    assert "INVALID_REPLICATION_FACTOR" in str(info.value)
    assert f"The target replication factor of {asked} cannot be reached" in str(info.value)
    assert _partitions(kafka_bootstrap, sink) is None


def test_missing_output_topic_is_created_with_the_jobs_partition_count(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A task that sends to a topic that does not exist yet: the topic is created with one
    partition per task, every commit succeeds, and the last emitted count of each user equals
    the stored count."""
    source, sink = topic_name("in"), topic_name("out")
    create_topic(kafka_bootstrap, source, 3)
    expected = produce_users(kafka_bootstrap, source, 600, 40, 3)
    assert _partitions(kafka_bootstrap, sink) is None
    name = topic_name("job")
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state", **{"emit.stream": f"kafka.{sink}"}))
    out = run_job(conf, "--bounded", timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Kafka did not accept" not in out.stdout + out.stderr
    assert _partitions(kafka_bootstrap, sink) == 3
    # the changelogs' replication: min(3, brokers) (a one-broker cluster here; see
    # test_a_created_output_topic_asks_for_min_3_brokers_replicas for larger counts)
    assert _replicas(kafka_bootstrap, sink) == _replicas(kafka_bootstrap,
                                                         f"{name}-counts-changelog")
    brokers = len(AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(
        timeout=30).brokers)
    assert _replicas(kafka_bootstrap, sink) == {min(3, brokers)}
    emitted = {k.decode(): int(v) for k, v in latest_by_key(read_topic(kafka_bootstrap, sink)).items()}
    assert emitted == dict(expected)
    assert dump_store(conf, "counts") == dict(expected)


def test_output_topic_that_cannot_be_created_stops_the_job_naming_it(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A name Kafka refuses (over 249 characters): the first send stops the job with an error
    that names the topic and the command that creates one; nothing of it was committed."""
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 1)
    produce_users(kafka_bootstrap, source, 50, 5, 1)
    bad = "o" * 260
    name = topic_name("job")
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state", **{"emit.stream": f"kafka.{bad}"}))
    out = run_job(conf, "--bounded", timeout=90)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert f"output topic {bad} does not exist and could not be created" in text
    assert "kafka-topics.sh" in text and "Traceback" not in text
    # The failing message was the first one: no commit covered any input.
    assert dump_store(conf, "counts") == {}


def test_the_envelope_carries_stream_partition_offset_timestamp_and_headers(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """What a StreamTask's envelope holds for each input record, as the docs list it: the
    stream (topic), partition, offset, deserialized key and message, the record's Kafka
    timestamp and its headers in order (repeated names kept)."""
    source, sink = topic_name("in"), topic_name("echo")
    create_topic(kafka_bootstrap, source, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    sent = [(p, f"user-{i}", 1_700_000_000_000 + i, [("trace", f"t{i}".encode()), ("trace", b"again")])
            for i, p in enumerate([0, 1, 1, 0, 1])]
    for p, key, ts, headers in sent:
        producer.produce(source, key=key.encode(), value=json.dumps({"n": key}).encode(),
                         partition=p, timestamp=ts, headers=headers)
    assert producer.flush(30) == 0
    name = topic_name("job")
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state", **{
        "task.class": "tests.jobs.envelope_echo.EnvelopeEcho", "echo.stream": f"kafka.{sink}"})
    out = run_job(write_properties(tmp_path / "job.properties", props), "--bounded", timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    echoed = sorted((json.loads(m.value()) for m in read_topic(kafka_bootstrap, sink)),
                    key=lambda e: (e["partition"], e["offset"]))
    offsets: dict[int, int] = {}
    expected = []
    for p, key, ts, headers in sent:
        offset = offsets[p] = offsets.get(p, -1) + 1
        expected.append({"stream": source, "partition": p, "offset": offset, "key": key,
                         "message": {"n": key}, "timestamp": ts,
                         "headers": [[k, v.decode()] for k, v in headers],
                         "ssp": ["kafka", source, p]})
    assert echoed == sorted(expected, key=lambda e: (e["partition"], e["offset"]))


def test_inputs_with_unequal_partition_counts_are_refused_before_anything_is_made(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Task N reads partition N of every input: inputs of 2 and 3 partitions stop the job at
    start with both counts named, exit 2, before its changelog or checkpoint topic exists."""
    a, b = topic_name("in-a"), topic_name("in-b")
    create_topic(kafka_bootstrap, a, 2)
    create_topic(kafka_bootstrap, b, 3)
    name = topic_name("job")
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, f"{a},kafka.{b}", tmp_path / "state"))
    out = run_job(conf, "--bounded", timeout=90)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"inputs must have equal partition counts (task N reads partition N of each): " \
           f"{a}=2, {b}=3" in out.stderr, out.stderr
    assert _partitions(kafka_bootstrap, f"{name}-counts-changelog") is None
    assert _partitions(kafka_bootstrap, checkpoint_topic(name, "1")) is None

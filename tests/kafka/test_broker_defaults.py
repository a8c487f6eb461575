"""A broker with Kafka's own defaults, where ``auto.create.topics.enable`` is true: a metadata
request that names a missing topic creates it (1 partition, delete policy) unless the client
says not to. The dev broker turns that off, which hid this: a new job's first look at its
changelog created it wrong, and the job refused to start ("has 1 partitions but the job has
4 tasks"). millpond's clients never ask for auto-creation; these tests run a job there."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from millpond.changelog.checkpoint import checkpoint_topic
from tests.conftest import unavailable
from tests.kafka_util import (
    RecordingClient,
    counting_job,
    create_topic,
    dump_store,
    latest_by_key,
    produce_users,
    read_topic,
    run_job,
    topic_layout,
    write_properties,
)

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def auto_creating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker of its own with ``auto.create.topics.enable=true``, Kafka's default."""
    from millpond.dev.errors import DevError
    from millpond.dev.kafka import LocalKafka, free_port

    broker = LocalKafka(data_dir=tmp_path_factory.mktemp("auto-create-kafka"), port=free_port(),
                        controller_port=free_port(),
                        extra_config={"auto.create.topics.enable": "true"})
    try:
        broker.start(timeout=120)
    except DevError as exc:
        unavailable(f"no local broker: {exc}")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _exists(bootstrap: str, topic: str) -> bool:
    """Whether ``topic`` exists, asked by a consumer (whose lookups create nothing)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "looker"})
    try:
        md = consumer.list_topics(topic, timeout=30).topics.get(topic)
        return md is not None and md.error is None
    finally:
        consumer.close()


def _layout(bootstrap: str, topic: str) -> tuple[int, str]:
    parts, conf = topic_layout(bootstrap, topic)
    return parts, conf["cleanup.policy"]


def test_a_new_job_makes_its_own_topics_where_the_broker_would_auto_create_them(
    auto_creating: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """A broker that auto-creates: the probe below proves a plain admin client's lookup
    creates a missing topic there. A new job on it starts, counts exactly, and its changelog,
    checkpoint and output topics have its 3 partitions and their own policies."""
    probe = topic_name("probe")
    AdminClient({"bootstrap.servers": auto_creating}).list_topics(probe, timeout=30)
    deadline = time.monotonic() + 30  # the broker creates it after answering
    while not _exists(auto_creating, probe) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _layout(auto_creating, probe) == (1, "delete"), "the broker did not auto-create"

    source, sink, name = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(auto_creating, source, 3)
    expected = produce_users(auto_creating, source, 600, 40, 3)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        auto_creating, name, source, tmp_path / "state", **{"emit.stream": f"kafka.{sink}"}))
    out = run_job(conf, "--bounded", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert dump_store(conf, "counts") == dict(expected)
    # Where its start-up went, once: each phase, summing to the total.
    line = next(x for x in out.stderr.splitlines() if "start-up: all 3 task(s) ready" in x)
    total = float(line.split(" ready ")[1].split(" s ")[0])
    phases = dict(p.rsplit(" ", 2)[:2] for p in line.split("started: ")[1].split("; "))
    assert list(phases) == ["interpreter, imports and config", "Kafka reachable", "ACL check",
                            "the job's topics", "joining the group (partitions assigned)",
                            "tasks opened"]
    assert sum(map(float, phases.values())) == pytest.approx(total, abs=0.01)
    assert _layout(auto_creating, f"{name}-counts-changelog") == (3, "compact")
    assert _layout(auto_creating, checkpoint_topic(name, "1")) == (3, "compact")
    assert _layout(auto_creating, sink) == (3, "delete")
    emitted = {k.decode(): int(v) for k, v in latest_by_key(read_topic(auto_creating,
                                                                       sink)).items()}
    assert emitted == dict(expected)


def test_a_missing_input_is_named_and_not_created(
    auto_creating: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    missing, name = topic_name("missing-in"), topic_name("job")
    conf = write_properties(tmp_path / "job.properties", counting_job(
        auto_creating, name, missing, tmp_path / "state"))
    out = run_job(conf, "--bounded", timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr[-3000:]
    assert f"input topic {missing} (task.inputs) does not exist" in out.stderr
    assert not _exists(auto_creating, missing)
    assert not _exists(auto_creating, f"{name}-counts-changelog")


def test_is_kafka_there_asks_for_one_topic_and_creates_none(
    auto_creating: str, topic_name: Callable[[str], str],
) -> None:
    """A job's "is Kafka there, with how many brokers" asks for its checkpoint topic's
    metadata (not every topic's: 10-60 ms a time on a cluster of a thousand topics), which
    answers before that topic exists and does not create it."""
    from millpond.kafka.admin import TopicAdmin

    probe = topic_name("ckpt")
    admin = TopicAdmin({"bootstrap.servers": auto_creating}, probe_topic=probe)
    spy = RecordingClient(admin.admin, "list_topics")
    admin.admin = spy  # type: ignore[assignment]
    assert admin.wait_reachable(10, print)
    assert admin.broker_count() == 1
    assert spy.calls == [("list_topics", probe), ("list_topics", probe)]
    assert not _exists(auto_creating, probe)

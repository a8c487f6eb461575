"""The topics millpond creates for a job, and a changelog truncated behind its checkpoint.

README: changelogs are created compacted with ``stores.<s>.changelog.kafka.*`` topic settings
and ``stores.<s>.changelog.replication.factor`` (default min(3, brokers)); the checkpoint
topic is compacted too. "A checkpoint that names changelog offsets the topic no longer has
(deleted or truncated) stops the job with an error; `millpond restore --from-local` re-seeds
the changelog from the local stores."
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from millpond.changelog.checkpoint import checkpoint_topic
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

TIMEOUT = 30


def _topic_config(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    return {name: entry.value for name, entry in entries.items()}


def _replicas(admin: AdminClient, topic: str) -> dict[int, int]:
    """Replica count of every partition of ``topic``."""
    md = admin.list_topics(topic, timeout=TIMEOUT).topics[topic]
    assert md.error is None, md.error
    return {p: len(part.replicas) for p, part in md.partitions.items()}


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks",
                         "isolation.level": "read_committed"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                   timeout=TIMEOUT)
        return int(low), int(high)
    finally:
        consumer.close()


def _set_cleanup_policy(admin: AdminClient, topic: str, policy: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", policy,
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT)
    # The broker applies a topic config change asynchronously: wait (bounded) until it shows.
    deadline = time.monotonic() + 30
    while _topic_config(admin, topic)["cleanup.policy"] != policy:
        assert time.monotonic() < deadline, f"{topic}: cleanup.policy={policy} not applied in 30 s"
        time.sleep(0.2)


def _truncate(admin: AdminClient, topic: str, partition: int, before: int) -> None:
    """Delete the records of ``topic[partition]`` before offset ``before``. Kafka refuses
    DeleteRecords on a compact-only topic (POLICY_VIOLATION), so the topic is made
    ``compact,delete`` for the deletion and compacted again after it."""
    _set_cleanup_policy(admin, topic, "compact,delete")
    try:
        deadline = time.monotonic() + 30
        while True:  # the partition's log may take a moment longer to see the new policy
            [future] = admin.delete_records([TopicPartition(topic, partition, before)]).values()
            try:
                assert future.result(timeout=TIMEOUT).low_watermark == before
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        _set_cleanup_policy(admin, topic, "compact")
    assert _topic_config(admin, topic)["cleanup.policy"] == "compact"


def test_created_changelog_is_compacted_with_its_topic_settings(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 3)
    expected = produce_users(kafka_bootstrap, source, 600, 40, 3)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state", **{
            "stores.counts.changelog.kafka.segment.bytes": 1048576,
            "stores.counts.changelog.kafka.min.compaction.lag.ms": 4321,
            "stores.counts.changelog.kafka.max.message.bytes": 2000000,
            "stores.counts.changelog.replication.factor": 1,
        }))
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    assert dump_store(conf, "counts") == dict(expected)

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    changelog = f"{name}-counts-changelog"
    settings = _topic_config(admin, changelog)
    assert settings["cleanup.policy"] == "compact"
    assert settings["segment.bytes"] == "1048576"
    assert settings["min.compaction.lag.ms"] == "4321"
    assert settings["max.message.bytes"] == "2000000"
    assert _replicas(admin, changelog) == {0: 1, 1: 1, 2: 1}  # one partition per task

    ckpt = checkpoint_topic(name, "1")
    assert _topic_config(admin, ckpt)["cleanup.policy"] == "compact"
    assert len(_replicas(admin, ckpt)) == 3


def test_changelog_replication_factor_is_the_configured_one(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """On one broker a factor of 2 cannot be met, so creating the changelog must fail and say
    so (proof the setting reaches the broker); on two or more brokers it must be met."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    brokers = len(admin.list_topics(timeout=TIMEOUT).brokers)
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    produce_users(kafka_bootstrap, source, 50, 5, 2)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state")
    changelog = f"{name}-counts-changelog"

    default = write_properties(tmp_path / "default.properties", props)
    assert run_job(default, "--bounded").returncode == 0
    assert set(_replicas(admin, changelog).values()) == {min(3, brokers)}

    wanted = 2
    other = topic_name("other-changelog")
    conf = write_properties(tmp_path / "rf.properties", {
        **props, "job.name": topic_name("job2"),
        "stores.counts.changelog": f"kafka.{other}",
        "stores.counts.changelog.replication.factor": wanted})
    run = run_job(conf, "--bounded")
    if brokers >= wanted:
        assert run.returncode == 0, run.stderr[-3000:]
        assert set(_replicas(admin, other).values()) == {wanted}
    else:
        assert run.returncode == 1  # Kafka could not create it
        assert f"could not create changelog topic {other}" in run.stderr, run.stderr[-3000:]
        assert "replication factor" in run.stderr.lower(), run.stderr[-3000:]
        assert other not in admin.list_topics(timeout=TIMEOUT).topics


@pytest.mark.parametrize("local_store", ["intact", "deleted"])
def test_changelog_truncated_past_its_checkpoint_stops_the_job(
    local_store: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Records deleted (AdminClient.delete_records) up to the changelog's end, past the offset
    the checkpoint says the store wrote: `run` and `restore` refuse with the documented error,
    whether or not the local store survived; with it intact, `restore --from-local` re-seeds
    the changelog and the job goes on with exact state."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 1000, 60, 2)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state"))
    assert run_job(conf, "--bounded").returncode == 0
    changelog = f"{name}-counts-changelog"
    shown = millpond("checkpoint", "show", "--config", str(conf), "--format", "json")
    written = json.loads(shown.stdout)["partition-0"]["changelogs"]["counts"]
    low, high = _watermarks(kafka_bootstrap, changelog, 0)
    assert low == 0 and high > written + 1  # the commit's marker follows the last record

    _truncate(AdminClient({"bootstrap.servers": kafka_bootstrap}), changelog, 0, high)
    assert _watermarks(kafka_bootstrap, changelog, 0)[0] == high
    if local_store == "deleted":
        shutil.rmtree(tmp_path / "state")
    expected += produce_users(kafka_bootstrap, source, 200, 60, 2)

    message = (f"changelog {changelog}[0] starts at offset {high} but the last checkpoint says "
               f"store counts wrote offset {written}")
    refused = run_job(conf, "--bounded")
    assert refused.returncode == 1
    assert message in refused.stderr, refused.stderr[-3000:]
    assert "truncated" in refused.stderr and "millpond restore --from-local" in refused.stderr
    assert "Traceback" not in refused.stderr
    offline = millpond("restore", "--config", str(conf))
    assert offline.returncode == 1  # a truncated changelog: a runtime failure
    assert message in offline.stderr, offline.stderr

    reseed = millpond("restore", "--config", str(conf), "--from-local")
    if local_store == "deleted":
        assert reseed.returncode == 2
        assert "nothing to re-seed from" in reseed.stderr, reseed.stderr
        return
    assert reseed.returncode == 0, reseed.stderr
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    assert dump_store(conf, "counts") == dict(expected)
    shutil.rmtree(tmp_path / "state")  # the re-seeded changelog alone holds the state now
    assert millpond("restore", "--config", str(conf)).returncode == 0
    assert dump_store(conf, "counts") == dict(expected)

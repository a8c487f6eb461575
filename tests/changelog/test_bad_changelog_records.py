"""A changelog record the store's serdes cannot decode is never copied into a store
silently: restore names it (store, topic, partition, offset, key) and stops, or with
``stores.<s>.changelog.bad.records=skip`` leaves it out, counted and logged, under every
guarantee."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

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

SKIP = ("--config-override", "stores.counts.changelog.bad.records=skip")


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


# exactly-once restores as at-least-once does (to the changelog's end): marked slow so a
# quick target can leave it out
@pytest.mark.parametrize("guarantee", [
    "at-least-once", "effectively-once", pytest.param("exactly-once", marks=pytest.mark.slow)])
def test_an_undecodable_changelog_record_is_named_then_failed_or_skipped(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, guarantee: str,
) -> None:
    source, job = topic_name("in"), topic_name("job")
    changelog = f"{job}-counts-changelog"
    create_topic(kafka_bootstrap, source, 1)
    expected = produce_users(kafka_bootstrap, source, 100, 10, 1)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, job, source, tmp_path / "s",
        **{"task.processing.guarantee": guarantee}))
    first = run_job(conf, "--bounded")
    assert first.returncode == 0, first.stderr[-2000:]
    # a damaged record lands in the changelog (not JSON, under a key the store has)
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(changelog, key=b"user-3", value=b"\xff not json", partition=0,
                     on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert producer.flush(30) == 0
    [bad] = offsets
    expected += produce_users(kafka_bootstrap, source, 20, 10, 1)
    named = f"store counts: changelog record {changelog}[0]@{bad} (key 'user-3') does not decode"

    # The next run: at-least-once and exactly-once restore to the changelog's end and meet
    # the record (fail by default, skip when asked); effectively-once restores to its
    # checkpoint and trims the record away by re-writing user-3's committed value after it.
    run = run_job(conf, "--bounded")
    if guarantee != "effectively-once":
        assert run.returncode == 1, run.stderr[-2000:]  # a damaged changelog: runtime
        [error] = _errors(run.stderr)
        assert named in error and "changelog.bad.records=skip" in error, error
        run = run_job(conf, "--bounded", *SKIP)
        assert run.returncode == 0, run.stderr[-2000:]
        assert named in run.stderr and "skipped" in run.stderr
    else:  # a full restore reads the record, now in the middle of the changelog
        assert run.returncode == 0, run.stderr[-2000:]
        failed = millpond("restore", "--config", str(conf), "--full")
        assert failed.returncode == 1, failed.stdout + failed.stderr
        [error] = _errors(failed.stderr)
        assert named in error and "changelog.bad.records=skip" in error, error
    # skip: the full restore leaves the record out and the state is exact
    skipped = millpond("restore", "--config", str(conf), "--full", *SKIP)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert named in skipped.stderr and "1 records" in skipped.stderr, skipped.stderr[-2000:]
    assert dump_store(conf, "counts") == dict(expected)

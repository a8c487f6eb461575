"""The container against a real broker: scale-out, bad input, topic checks, restore."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
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
    read_topic,
    run_job,
    start_job,
    wait_for_line,
    write_properties,
)

pytestmark = pytest.mark.kafka


def test_two_processes_scale_out_and_back(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A second process joins halfway and is SIGTERMed later; counts stay exact."""
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 4)
    expected = produce_users(kafka_bootstrap, source, 8000, 200, 4)
    name = topic_name("job")
    base = counting_job(kafka_bootstrap, name, source, tmp_path / "a",
                        **{"task.class": "tests.jobs.counting.SlowCounter"})
    # Dynamic membership: a static member (group.instance.id) does not leave the group on
    # shutdown, so its partitions would only move after session.timeout.ms.
    del base["systems.kafka.consumer.group.instance.id"]
    a_conf = write_properties(tmp_path / "a.properties", base)
    b_conf = write_properties(tmp_path / "b.properties", {
        **base, "job.logged.store.base.dir": str(tmp_path / "b")})
    slow = {"MILLPOND_TEST_DELAY": "0.001"}  # ~8 s of work for one process
    a = start_job(a_conf, "--bounded", env=slow)
    b = None
    try:
        wait_for_line(a, "ready")
        time.sleep(1.5)
        b = start_job(b_conf, env=slow)
        b_lines = wait_for_line(b, "ready")
        assert any("assigned partitions" in line for line in b_lines)
        time.sleep(1.5)
        b.send_signal(signal.SIGTERM)
        b_out, _ = b.communicate(timeout=60)
        assert b.returncode == 0, b_out
        assert "revoking partitions" in b_out
        a_out, _ = a.communicate(timeout=120)
        assert a.returncode == 0, a_out
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
    # The partitions came back to A, which restored the tail B wrote; its stores hold it all.
    assert dump_store(a_conf, "counts") == dict(expected), a_out[-3000:]


def _poison_input(bootstrap: str, topic: str) -> tuple[Counter[str], int]:
    """Good messages, one malformed JSON message in partition 0, then more good ones."""
    create_topic(bootstrap, topic, 1)
    expected = produce_users(bootstrap, topic, 300, 10, 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"user-1", value=b"{not json", partition=0)
    producer.flush(30)
    poison_offset = 300
    expected += produce_users(bootstrap, topic, 200, 10, 1)
    return expected, poison_offset


def test_poison_message_stops_the_job_naming_where(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source = topic_name("in")
    _, offset = _poison_input(kafka_bootstrap, source)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "s"))
    run = run_job(conf, "--bounded")
    assert run.returncode != 0
    assert f"{source}[0] at offset {offset}" in run.stderr, run.stderr[-2000:]
    assert "JSON" in run.stderr or "json" in run.stderr
    shown = millpond("checkpoint", "show", "--config", str(conf), "--format", "json")
    ckpt = json.loads(shown.stdout)["partition-0"]
    assert ckpt["inputs"][source] == offset, "everything before the poison message is committed"
    state = dump_store(conf, "counts")
    assert sum(state.values()) == offset


def test_poison_message_dropped_when_configured(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source = topic_name("in")
    expected, _ = _poison_input(kafka_bootstrap, source)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "s",
        **{"task.drop.deserialization.errors": "true"}))
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "dropped" in run.stderr
    assert dump_store(conf, "counts") == dict(expected)


def test_poison_message_goes_to_dead_letter_topic(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, dlq = topic_name("in"), topic_name("dlq")
    expected, offset = _poison_input(kafka_bootstrap, source)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "s",
        **{"task.dlq.stream": f"kafka.{dlq}"}))
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-2000:]
    assert dump_store(conf, "counts") == dict(expected)
    [dead] = read_topic(kafka_bootstrap, dlq)
    assert dead.value() == b"{not json" and dead.key() == b"user-1"
    headers = dict(dead.headers())
    assert headers["millpond.offset"] == str(offset).encode()
    assert headers["millpond.topic"] == source.encode()
    assert b"deserialization" in headers["millpond.error"]


@pytest.mark.parametrize("problem", ["partitions", "policy"])
def test_unusable_changelog_is_refused(
    problem: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    changelog = f"{name}-counts-changelog"
    if problem == "partitions":
        create_topic(kafka_bootstrap, changelog, 3, **{"cleanup.policy": "compact"})
    else:
        create_topic(kafka_bootstrap, changelog, 2, **{"cleanup.policy": "delete"})
    conf = write_properties(tmp_path / "job.properties",
                            counting_job(kafka_bootstrap, name, source, tmp_path / "s"))
    run = run_job(conf, "--bounded")
    assert run.returncode != 0
    if problem == "partitions":
        assert f"{changelog} has 3 partitions but the job has 2 tasks" in run.stderr
    else:
        assert f"{changelog} has cleanup.policy=delete" in run.stderr
        assert "cleanup.policy=compact" in run.stderr


def test_restore_rebuilds_a_deleted_store_identically(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 2)
    produce_users(kafka_bootstrap, source, 3000, 150, 2)
    name = topic_name("job")
    conf = write_properties(tmp_path / "job.properties",
                            counting_job(kafka_bootstrap, name, source, tmp_path / "s"))
    assert run_job(conf, "--bounded").returncode == 0
    before = millpond("store", "dump", "--config", str(conf), "--store", "counts").stdout
    assert before.count("\n") == 150
    for path in (tmp_path / "s" / name / "counts").glob("partition-1*"):
        import shutil

        shutil.rmtree(path) if path.is_dir() else path.unlink()
    restored = millpond("restore", "--config", str(conf))
    assert restored.returncode == 0, restored.stderr
    assert "full" in restored.stdout
    after = millpond("store", "dump", "--config", str(conf), "--store", "counts").stdout
    assert after == before


def test_restore_listener_sees_a_full_restore(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    import shutil

    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    produce_users(kafka_bootstrap, source, 1000, 30, 1)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "s",
        **{"task.restore.listener.class": "tests.jobs.counting.RecordingRestoreListener"}))
    events = tmp_path / "events.txt"
    env = {"MILLPOND_TEST_EVENTS": str(events)}
    assert run_job(conf, "--bounded", env=env).returncode == 0
    shutil.rmtree(tmp_path / "s")
    events.unlink()
    run = run_job(conf, "--bounded", env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = events.read_text().splitlines()
    assert lines[0] == "start counts 0 0"
    assert lines[-1] == "end counts 0 30", lines
    assert any(line.startswith("batch counts 0") for line in lines)

"""A side input whose checkpointed position was deleted (retention, DeleteRecords) follows the
job's ``auto.offset.reset`` policy as an input does: ``error`` stops the job naming the side
input and loses nothing; ``earliest`` resumes at the new log start with one WARNING naming
topic, partition, offsets and records skipped, counted in the checkpoint (``millpond
status``). Before, librdkafka reset it silently."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka_util import (
    OutputLines,
    create_topic,
    dump_store,
    millpond,
    run_job,
    start_job,
    write_properties,
)
from tests.sideinputs.test_side_inputs import checkpointed_side_offsets, job, produce_views

pytestmark = pytest.mark.kafka


def produce_side(bootstrap: str, topic: str, first: int, n: int,
                 producer: Producer | None = None) -> None:
    """Profiles ``first``..``first + n - 1`` into partition 0 of the side input."""
    producer = producer or Producer({"bootstrap.servers": bootstrap})
    for i in range(first, first + n):
        producer.produce(topic, key=f"user-{i}".encode(), partition=0,
                         value=json.dumps({"name": f"user {i}"}).encode())
    assert producer.flush(30) == 0


def test_a_deleted_side_input_position_follows_the_reset_policy(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    views, side, out, name = (topic_name("views"), topic_name("profiles"), topic_name("out"),
                              topic_name("job"))
    create_topic(kafka_bootstrap, views, 2)
    create_topic(kafka_bootstrap, side, 2)  # cleanup.policy=delete: records can be deleted
    produce_side(kafka_bootstrap, side, 0, 20)
    produce_views(kafka_bootstrap, views, 0, 10)
    config = write_properties(tmp_path / "job.properties", job(
        kafka_bootstrap, name, views, side, out, tmp_path / "state", "effectively-once"))
    first = run_job(config, "--bounded", timeout=90)
    assert first.returncode == 0, first.stdout + first.stderr

    produce_side(kafka_bootstrap, side, 20, 20)  # offsets 20..39; the job has read to 20
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(side, 0, 30)]).values():
        future.result(30)  # 20..29 deleted before the job read them

    stopped = run_job(config, "--bounded", "--config-override",
                      "systems.kafka.consumer.auto.offset.reset=error", timeout=90)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr  # lost input: runtime
    assert (f"side input {side}[0] at start: the checkpointed offset 20 no longer exists: the "
            "log starts at 30") in stopped.stderr, stopped.stderr
    assert "Traceback" not in stopped.stderr
    before = {f"user-{i}": {"name": f"user {i}"} for i in range(20)}
    assert dump_store(config, "profiles") == before  # nothing committed lost or moved

    resumed = run_job(config, "--bounded", timeout=90)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = resumed.stdout + resumed.stderr
    warnings = re.findall(r"WARNING.*side input (\S+)\[(\d)\] at start: the checkpointed "
                          r"offset (\d+) .*resuming at offset (\d+) \(auto\.offset\.reset="
                          r"earliest\): (\d+) records skipped \((\d+) deleted", log)
    assert warnings == [(side, "0", "20", "30", "10", "10")], log
    assert dump_store(config, "profiles") == {
        **before, **{f"user-{i}": {"name": f"user {i}"} for i in range(30, 40)}}
    status = millpond("status", "--config", str(config), "--format", "json")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {row["partition"]: row for row in json.loads(status.stdout)["partitions"]}
    assert {p: rows[p]["skipped"] for p in rows} == {0: {side: 10}, 1: {}}

    again = run_job(config, "--bounded", timeout=90)  # the new position was committed
    assert again.returncode == 0, again.stdout + again.stderr
    assert not re.search(r"WARNING.*side input", again.stdout + again.stderr), again.stderr


def test_a_side_input_gap_while_running_is_warned_and_counted(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Side-input records the running job has not read yet are deleted: its reader resumes
    at the log start with the WARNING, and the store holds the records before and after the
    gap. Exactly-once (side inputs read read_committed), so a transaction holds the new
    records back until they are deleted, and the job is paused (SIGSTOP) meanwhile so that
    no fetch sees the gap half made."""
    views, side, out, name = (topic_name("views"), topic_name("profiles"), topic_name("out"),
                              topic_name("job"))
    create_topic(kafka_bootstrap, views, 2)
    create_topic(kafka_bootstrap, side, 2)
    produce_side(kafka_bootstrap, side, 0, 20)
    produce_views(kafka_bootstrap, views, 0, 10)
    config = write_properties(tmp_path / "job.properties", job(
        kafka_bootstrap, name, views, side, out, tmp_path / "state", "exactly-once"))
    proc = start_job(config)
    try:
        lines = OutputLines(proc)
        lines.wait_for("both tasks ready", lambda ls: "".join(ls).count(" ready: restored ") == 2)
        txn = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{name}-t"})
        txn.init_transactions(30)
        txn.begin_transaction()
        produce_side(kafka_bootstrap, side, 20, 20, txn)  # offsets 20..39, not readable yet
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
            for future in admin.delete_records([TopicPartition(side, 0, 30)]).values():
                future.result(30)
            txn.commit_transaction(30)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        lines.wait_for("the side input's warning", lambda ls: re.search(
            r"WARNING.*side input (\S+)\[0\] while running: the next offset 20 .*resuming at "
            r"offset 30 \(auto\.offset\.reset=earliest\): 10 records skipped", "".join(ls))
            is not None)
        deadline = time.monotonic() + 60  # then reads 30..39 and commits past them
        while checkpointed_side_offsets(kafka_bootstrap, name)[0]["profiles"][side] < 40:
            assert time.monotonic() < deadline and proc.poll() is None, lines.text()[-3000:]
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, lines.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert dump_store(config, "profiles") == {
        f"user-{i}": {"name": f"user {i}"} for i in [*range(20), *range(30, 40)]}
    status = millpond("status", "--config", str(config), "--format", "json")
    rows = {row["partition"]: row for row in json.loads(status.stdout)["partitions"]}
    assert rows[0]["skipped"] == {side: 10}

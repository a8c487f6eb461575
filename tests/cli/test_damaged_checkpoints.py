"""Damaged records in the checkpoint topic are named, skipped where nothing is lost, and
removable (issue #35).

A random-bytes key (and value) in the checkpoint topic used to make ``run``, ``status``,
``checkpoint show``, ``store dump``, ``restore`` and ``changelog describe`` die with a
``UnicodeDecodeError``. Now each of them works, warning with the record's topic, partition,
offset and key and how to remove it (``checkpoint drop``, a tombstone with its raw key);
an unreadable newest record of a task is skipped for the task's older readable checkpoint
(``checkpoint set`` replaces it); a task whose only checkpoint is unreadable stops ``run``
with one line naming it, never a silent start from scratch.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from millpond.changelog.checkpoint import checkpoint_topic
from tests.kafka_util import (
    MILLPOND,
    REPO,
    counting_job,
    create_topic,
    dump_store,
    millpond,
    read_topic,
    run_job,
    write_properties,
)

# 35-45 s each measured at a load average of ~30 on 2 cores: marked slow, run by make test-slow.
pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RANDOM_KEY = b"\xff\xfe\x00\x9c"


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[int]:
    """Write ``records`` (key, value) to partition 0 of ``topic``; their offsets."""
    offsets: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert producer.flush(30) == 0
    return offsets


def _users(bootstrap: str, topic: str, users: list[str]) -> None:
    _produce(bootstrap, topic, [(u.encode(), json.dumps({"user_id": u}).encode())
                                for u in users])


def _cli(conf: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([MILLPOND, *args, "--config", str(conf)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _show(conf: Path) -> tuple[dict[str, Any], str]:
    out = millpond("checkpoint", "show", "--config", str(conf), "--format", "json")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout)), out.stderr


def test_damaged_checkpoint_records_are_named_skipped_and_removable(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    _users(kafka_bootstrap, source, [f"u{i}" for i in range(10)])
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state")
    del props["systems.kafka.consumer.group.instance.id"]  # leaves the group as it stops
    conf = write_properties(tmp_path / "job.properties", props)
    done = run_job(conf, "--bounded", timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    topic = checkpoint_topic(name, "1")
    before, _ = _show(conf)
    assert before["partition-0"]["inputs"] == {source: 10}

    # Random bytes as key and value: every command works, naming the record.
    [bad] = _produce(kafka_bootstrap, topic, [(RANDOM_KEY, b"\x80\x81\x82 not json")])
    warning = (f"WARNING millpond.changelog.checkpoint: checkpoint topic: skipped {topic}[0]"
               f"@{bad} (key 0x{RANDOM_KEY.hex()}, not UTF-8): its key is not UTF-8 (not a "
               f"task name); it is no task's checkpoint: remove it with `millpond checkpoint "
               f"drop --config ... --partition 0 --offset {bad}` (a tombstone with its raw key)")
    # The commands that only read Kafka run at once; `store dump` and `restore` each take
    # the store's lock, so they run one after the other (at once, one finds it held).
    readers = [("checkpoint", "show", "--format", "json"), ("status", "--format", "json"),
               ("changelog", "describe")]
    for group in (readers, [("store", "dump", "--store", "counts")], [("restore",)]):
        commands = {args: _cli(conf, *args) for args in group}
        for args, proc in commands.items():
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, (args, err)
            assert warning in err.splitlines(), (args, err)
            assert "Traceback" not in err
            if args[0] == "checkpoint":
                assert json.loads(out) == before
    _users(kafka_bootstrap, source, ["u0", "v1"])
    again = run_job(conf, "--bounded", timeout=90)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"skipped {topic}[0]@{bad} (key 0x{RANDOM_KEY.hex()}" in again.stderr
    expected = Counter([f"u{i}" for i in range(10)] + ["u0", "v1"])
    assert dump_store(conf, "counts") == dict(expected)
    after_run, _ = _show(conf)
    assert after_run["partition-0"]["inputs"] == {source: 12}

    # An unreadable newest record of a task: skipped for its older readable checkpoint;
    # drop refuses it (a tombstone would remove the task's position), set replaces it.
    [task_bad] = _produce(kafka_bootstrap, topic, [(b"partition-0", b"\xff{garbage")])
    shown, err = _show(conf)
    assert shown == after_run
    assert (f"skipped {topic}[0]@{task_bad} (key 'partition-0'), the newest record of task "
            "partition-0: not a millpond checkpoint") in err, err
    assert "the task resumes from its newest readable checkpoint" in err, err
    refused = millpond("checkpoint", "drop", "--config", str(conf), "--partition", "0",
                       "--offset", str(task_bad))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"Error: {topic}[0]@{task_bad} (key 'partition-0') is an unreadable checkpoint of "
        "task partition-0: a tombstone would remove the task's position altogether; write a "
        "valid one with `millpond checkpoint set --partition 0 --offset TOPIC=OFFSET` "
        "instead; nothing written")
    fixed = millpond("checkpoint", "set", "--config", str(conf), "--partition", "0",
                     "--offset", f"{source}=12")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout) == after_run["partition-0"]  # same position, stores kept

    # The random record removed by its raw key: no warning left.
    dropped = millpond("checkpoint", "drop", "--config", str(conf), "--partition", "0",
                       "--offset", str(bad))
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.strip() == (f"wrote a tombstone for {topic}[0]@{bad} (key "
                                      f"0x{RANDOM_KEY.hex()}, not UTF-8)")
    last = read_topic(kafka_bootstrap, topic)[-1]
    assert (last.key(), last.value()) == (RANDOM_KEY, None)
    shown, err = _show(conf)
    assert shown == after_run and err == "", err

    # A task whose only checkpoint is unreadable: run stops naming it, nothing processed.
    other = topic_name("job2")
    other_topic = checkpoint_topic(other, "1")
    create_topic(kafka_bootstrap, other_topic, 1, **{"cleanup.policy": "compact"})
    [only] = _produce(kafka_bootstrap, other_topic, [(b"partition-0", b"\x80\x81")])
    other_conf = write_properties(tmp_path / "other.properties", {
        **props, "job.name": other, "stores.counts.changelog": f"kafka.{other}-changelog"})
    stopped = run_job(other_conf, "--bounded", timeout=90)
    assert stopped.returncode == 1, stopped.stderr[-3000:]  # damaged checkpoint: runtime
    assert stopped.stderr.strip().splitlines()[-1].startswith(
        f"Error: checkpoint topic: {other_topic}[0]@{only} (key 'partition-0') is the only "
        "checkpoint of task partition-0 left and unreadable"), stopped.stderr[-3000:]
    assert not (tmp_path / "state" / other / "counts" / "partition-0" / "OFFSET").exists()
    shown, err = _show(other_conf)
    assert shown == {} and "left out" in err, err

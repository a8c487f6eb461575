"""``millpond checkpoint set`` refuses what it cannot mean, and a checkpoint beyond a
partition's end is moved once (issue #35).

The installed console script against the real broker: a refused ``set`` exits 2 with one
``Error:`` line naming the valid range or topics and leaves the checkpoint topic exactly as
it was; ``--force`` writes, saying so; the next run moves the forced position per
``auto.offset.reset``, warns once and commits the new position, so a later run neither warns
nor skips the records produced after it.
"""

from __future__ import annotations

import json
import re
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

BEYOND = re.compile(r"WARNING .*input (\S+)\[0\] \w+ \w+: the \w+ offset 99999 is beyond the "
                    r"partition's end (\d+).*resuming at offset (\d+)")


def _produce(bootstrap: str, topic: str, users: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for user in users:
        producer.produce(topic, key=user, value=json.dumps({"user_id": user}), partition=0)
    producer.flush(30)


def _show(conf: Path) -> dict[str, Any]:
    out = millpond("checkpoint", "show", "--config", str(conf), "--format", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    return dict(json.loads(out.stdout))


def _records(bootstrap: str, name: str) -> list[tuple[int, bytes | None]]:
    """Every record of the job's checkpoint topic: (offset, value)."""
    return [(m.offset(), m.value()) for m in read_topic(bootstrap, checkpoint_topic(name, "1"))]


def _set(conf: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([MILLPOND, "checkpoint", "set", "--config", str(conf), *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_checkpoint_set_refuses_what_it_cannot_mean_and_force_is_moved_once(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, f"{source}-other", 1)
    _produce(kafka_bootstrap, source, [f"u{i}" for i in range(17)])
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state")
    del props["systems.kafka.consumer.group.instance.id"]  # leaves the group as it stops
    conf = write_properties(tmp_path / "job.properties", props)

    # In range (the log end included) is written, quietly; task.inputs' spelling works too.
    out = millpond("checkpoint", "set", "--config", str(conf), "--partition", "0",
                   "--offset", f"kafka.{source}=17")
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert json.loads(out.stdout)["inputs"] == {source: 17}
    before, records = _show(conf), _records(kafka_bootstrap, name)
    assert before["partition-0"]["inputs"] == {source: 17}

    refused = {
        ("0", f"{source}=99999"): f"--offset {source}=99999: {source}[0] holds offsets 0..17 "
                                  "(log start..log end",
        ("0", f"{source}=18"): f"--offset {source}=18: {source}[0] holds offsets 0..17",
        ("0", f"{source}=-5"): f"--offset {source}=-5: an offset is the next record to "
                               "process, 0 or more",
        ("0", f"{source}-other=3"): f"--offset {source}-other=3: {source}-other is not an "
                                    f"input of job {name} (its inputs: {source})",
        ("1", f"{source}=3"): f"--partition 1: the job has tasks 0..0 (one per partition of "
                              f"{source})",
    }
    procs = {args: _set(conf, "--partition", args[0], "--offset", args[1]) for args in refused}
    for args, proc in procs.items():
        _, err = proc.communicate(timeout=120)
        lines = err.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, (args, err)
        assert lines[0].startswith("Error: ") and refused[args] in lines[0], (args, lines)
        assert "nothing written" in lines[0], lines
    # Nothing changed: no record was added to the checkpoint topic.
    assert _records(kafka_bootstrap, name) == records
    assert _show(conf) == before

    # --force writes, and says so.
    forced = millpond("checkpoint", "set", "--config", str(conf), "--partition", "0",
                      "--offset", f"{source}=99999", "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stderr.strip() == (
        f"Forced: --offset {source}=99999: {source}[0] holds offsets 0..17 (log start..log "
        "end; 17 resumes after its last record); written as --force asked"), forced.stderr
    assert _show(conf)["partition-0"]["inputs"] == {source: 99999}

    # The next run moves it per auto.offset.reset (earliest: the log start, as for a
    # recreated topic, whose records are all new) and commits that, warning once.
    _produce(kafka_bootstrap, source, ["v0", "v1", "v2"])  # offsets 17..19
    first = run_job(conf, "--bounded", timeout=90)
    assert first.returncode == 0, first.stderr[-3000:]
    warned = BEYOND.findall(first.stdout + first.stderr)
    assert warned == [(source, "20", "0")], first.stderr[-3000:]
    assert _show(conf)["partition-0"]["inputs"] == {source: 20}
    expected = Counter([f"u{i}" for i in range(17)] + ["v0", "v1", "v2"])
    assert dump_store(conf, "counts") == dict(expected)

    # Later runs start from the committed position: no warning, nothing skipped or doubled.
    _produce(kafka_bootstrap, source, ["w0"])
    again = run_job(conf, "--bounded", timeout=90)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "beyond the partition's end" not in again.stdout + again.stderr
    assert _show(conf)["partition-0"]["inputs"] == {source: 21}
    assert dump_store(conf, "counts") == dict(expected + Counter(["w0"]))

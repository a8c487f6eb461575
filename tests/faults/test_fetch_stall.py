"""A task whose input partition stops being fetched while records wait is found and resumed
(millpond.tasks.stalls), on a real broker with a real `millpond run` process.

The fault: ``MILLPOND_STALL_FETCH=1:200`` pauses partition 1 in the job's own group
consumer once its task has been handed offset 200 (as a fetcher that stopped for one
partition would: once, after a broker outage, a task's partition was not fetched again for
minutes). The job logs the fault; its stall watch must notice within ~40 s, assign the
partition again at the task's position, and the job must end with exact counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from millpond.tasks.faults import STALL_LOG
from tests.kafka_util import (
    OutputLines,
    checkpoint_records,
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    start_job,
    stop_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

RESUMED = "its fetch had stopped; assigned again at"


def test_a_partition_no_longer_fetched_is_found_and_assigned_again(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 10_000, 100, 2)  # 5,000 a partition
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "s", **{"task.commit.ms": 500}))
    proc = start_job(conf, env={"MILLPOND_STALL_FETCH": "1:200"})
    out = OutputLines(proc)
    try:
        lines = out.wait_for("the injected stall", lambda ls: any(STALL_LOG in x for x in ls))
        stalled_at = time.monotonic()
        # proof of the fault: partition 1 stands still below its end while partition 0 ends
        time.sleep(5.0)
        ckpts = checkpoint_records(kafka_bootstrap, name)
        assert ckpts[0][-1][1][source] == 5_000, ckpts.get(0, [])[-1:]
        assert ckpts[1][-1][1][source] < 5_000, ckpts.get(1, [])[-1:]
        lines = out.wait_for("the stall watch", lambda ls: any(RESUMED in x for x in ls),
                             timeout=90)
        found_after = time.monotonic() - stalled_at
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ckpts = checkpoint_records(kafka_bootstrap, name)
            if ckpts[1][-1][1][source] == 5_000:
                break
            time.sleep(0.5)
        assert ckpts[1][-1][1][source] == 5_000, "partition 1 did not resume"
    finally:
        stop_job(proc)
    assert proc.returncode == 0, out.text()[-3000:]
    line = next(x for x in lines if RESUMED in x)
    assert "partition-1" in line and f"{source}[1]" in line, line
    assert found_after < 60, f"found {found_after:.0f}s after the fetch stopped"
    assert dump_store(conf, "counts") == dict(expected)

"""Process crashes at random moments and an aborted transaction: nothing lost or doubled."""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    read_topic,
    run_job,
    start_job,
    state_diff,
    write_properties,
)

pytestmark = pytest.mark.kafka


def _output_diff(bootstrap: str, sink: str, expected: Counter[str]) -> tuple[int, int]:
    """(lost, duplicated) count results in a read_committed output topic."""
    seen: Counter[tuple[str, int]] = Counter()
    for msg in read_topic(bootstrap, sink, "read_committed"):
        seen[(msg.key().decode(), json.loads(msg.value()))] += 1
    wanted = {(user, i) for user, n in expected.items() for i in range(1, n + 1)}
    lost = len(wanted - set(seen))
    duplicated = sum(n - 1 for n in seen.values() if n > 1) + len(set(seen) - wanted)
    return lost, duplicated


@pytest.mark.parametrize("guarantee", ["effectively-once", "exactly-once"])
def test_random_sigkills(
    guarantee: str, full: bool, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    messages, kills = (1_000_000, 20) if full else (40_000, 4)
    rng = random.Random(20261122)
    source, sink = topic_name("in"), topic_name("out")
    create_topic(kafka_bootstrap, source, 4)
    create_topic(kafka_bootstrap, sink, 4)
    expected = produce_users(kafka_bootstrap, source, messages, 5000, 4)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "state",
        **{"task.processing.guarantee": guarantee, "task.commit.ms": 500,
           "emit.stream": f"kafka.{sink}"}))
    restores = 0
    done_early = False
    for _ in range(kills):
        proc = start_job(conf, "--bounded")
        time.sleep(rng.uniform(1.0, 3.0 if full else 2.5))
        if proc.poll() is not None:
            done_early = True
            break
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        restores += out.count("ready: restored")
    final = run_job(conf, "--bounded", timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    assert not done_early, "the job finished before all kills; give it more input"
    lost, duplicated = state_diff(dump_store(conf, "counts"), expected)
    if guarantee == "exactly-once":
        out_lost, out_dup = _output_diff(kafka_bootstrap, sink, expected)
        lost, duplicated = lost + out_lost, duplicated + out_dup
    report(f"SIGKILL x{kills} ({guarantee})",
           f"{messages:,} msgs, seeded kills, {restores} task restores", lost, duplicated,
           "exact" if lost == duplicated == 0 else "DIFF")
    assert (lost, duplicated) == (0, 0)


def test_aborted_transaction_rolls_back_local_state(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """An abortable commit error: the store's writes of that transaction are undone."""
    source, sink = topic_name("in"), topic_name("out")
    create_topic(kafka_bootstrap, source, 2)
    create_topic(kafka_bootstrap, sink, 2)
    expected = produce_users(kafka_bootstrap, source, 6000, 100, 2)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, topic_name("job"), source, tmp_path / "state",
        **{"task.processing.guarantee": "exactly-once", "task.commit.ms": 100,
           "emit.stream": f"kafka.{sink}"}))
    run = run_job(conf, "--bounded", env={"MILLPOND_ABORT_AT": "3"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "aborted" in run.stderr and "restoring it from the checkpoint" in run.stderr
    lost, duplicated = state_diff(dump_store(conf, "counts"), expected)
    out_lost, out_dup = _output_diff(kafka_bootstrap, sink, expected)
    report("aborted transaction (exactly-once)", "3rd commit fails abortably", lost + out_lost,
           duplicated + out_dup, "exact" if lost + out_lost + duplicated + out_dup == 0 else "DIFF")
    assert (lost, duplicated, out_lost, out_dup) == (0, 0, 0, 0)

"""SIGKILL a job between every two steps of its commit sequence, each time on a commit that
moves input (or mid-batch, after input was committed); state must stay exact."""

from __future__ import annotations

import ast
import json
import re
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from millpond.tasks.faults import CRASH_LOG, POINTS
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("guarantee", ["effectively-once", "exactly-once"])
def test_sigkill_at_every_commit_step(
    guarantee: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, sink = topic_name("in"), topic_name("out")
    create_topic(kafka_bootstrap, source, 4)
    create_topic(kafka_bootstrap, sink, 4)
    props = counting_job(kafka_bootstrap, topic_name("job"), source, tmp_path / "state",
                         **{"task.class": "tests.jobs.counting.SlowCounter",
                            "task.processing.guarantee": guarantee, "task.commit.ms": 50,
                            "emit.stream": f"kafka.{sink}"})
    config = write_properties(tmp_path / "job.properties", props)
    expected: Counter[str] = Counter()
    kills = 0
    for point in POINTS:
        expected += produce_users(kafka_bootstrap, source, 1500, 120, 4)
        # ~0.2 ms an input: a run's 1500 new inputs take several commits and batches, so
        # the second commit that moves input (mid-batch: the first batch after one) comes
        nth = 1 if point == "mid-batch" else 2
        run = run_job(config, "--bounded", env={"MILLPOND_TEST_DELAY": "0.0002",
                                                "MILLPOND_CRASH_AT": f"{point}:{nth}:moved"})
        assert run.returncode == -signal.SIGKILL, (
            f"{point}: expected a SIGKILL, got exit {run.returncode}:\n{run.stdout}{run.stderr}")
        fired = re.search(rf"{CRASH_LOG} {point} \((.*)\)\n", run.stderr)
        assert fired, f"{point}: the crash point did not say where it fired:\n{run.stderr[-3000:]}"
        if point == "mid-batch":
            assert fired.group(1) == "input committed before: True", fired.group(0)
        else:  # "task partition-N, input {...} -> {...}": this commit moves the input
            before, after = map(ast.literal_eval, fired.group(1).split(", input ", 1)[1]
                                .split(" -> "))
            assert after[source] > before[source], fired.group(0)
        kills += 1
    final = run_job(config, "--bounded")
    assert final.returncode == 0, final.stdout + final.stderr
    assert kills == len(POINTS)

    state = dump_store(config, "counts")
    assert state == dict(expected), "store differs from the reference count"

    if guarantee == "exactly-once":
        seen: Counter[tuple[str, int]] = Counter()
        for msg in read_topic(kafka_bootstrap, sink, "read_committed"):
            seen[(msg.key().decode(), json.loads(msg.value()))] += 1
        duplicates = {k: n for k, n in seen.items() if n > 1}
        assert not duplicates, f"results seen more than once: {list(duplicates)[:5]}"
        wanted = {(user, i) for user, n in expected.items() for i in range(1, n + 1)}
        assert set(seen) == wanted, "each count 1..N of every user appears exactly once"

"""Process crashes at random moments and an aborted transaction: nothing lost or doubled."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import (
    checkpoint_history,
    count_output_diff,
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    ready_lines,
    run_job,
    start_job,
    state_diff,
    wait_for_line,
    write_properties,
)

pytestmark = pytest.mark.kafka


# Every ANYTIME-th kill lands at a random moment after the start (start-up, restore, or
# processing); the others a random moment after the first task is ready, mostly after a
# commit, so the restart must resume from a checkpoint.
ANYTIME = 4


def _check_resumes(runs: list[tuple[dict[str, int], str]], history: dict[str, list[dict[str, int]]],
                   source: str) -> tuple[int, int, int]:
    """Each incarnation's tasks resume from a committed checkpoint no older than the last
    one committed before it started. ``runs``: (input offset per task committed before the
    start, the incarnation's log). Returns (task restores, restores that replayed > 0
    changelog records, incarnations that resumed a task from a checkpoint > 0)."""
    restores = replayed = resumed = 0
    for i, (before, out) in enumerate(runs):
        first: dict[str, tuple[int, dict[str, int]]] = {}
        for task, restored, inputs in ready_lines(out):
            first.setdefault(task, (restored, inputs))
            restores += 1
            replayed += restored > 0
        resumed_here = False
        for task, (_, inputs) in sorted(first.items()):
            committed = before.get(task, 0)
            at = inputs.get(source)
            assert at is not None and at >= committed, (
                f"incarnation {i}: task {task} resumed at {inputs} but {committed} was "
                f"committed before it started")
            if committed > 0:
                assert inputs in history.get(task, []), (
                    f"incarnation {i}: task {task} resumed at {inputs}, not a committed "
                    f"checkpoint ({history.get(task, [])[-5:]} ...)")
                resumed_here = True
            else:
                assert at == 0 or inputs in history.get(task, []), (i, task, inputs)
        resumed += resumed_here
    return restores, replayed, resumed


@pytest.mark.parametrize("guarantee", ["at-least-once", "effectively-once", "exactly-once"])
def test_random_sigkills(
    guarantee: str, full: bool, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """SIGKILL a counting job at seeded random moments, restart it each time, then let it
    finish. Every restart resumes from the last committed checkpoint (and most of them from
    one > 0: the kills mattered). State: no input lost under any guarantee; no duplicate
    under effectively- and exactly-once (at-least-once's duplicates are reported). Output:
    exactly once read_committed under exactly-once, else nothing lost read_uncommitted."""
    messages, kills = (1_000_000, 20) if full else (40_000, 4)
    # In CI the task is throttled (<= ~5k msg/s) so a few kills cannot finish the input
    # however fast the machine; the long version runs at full speed with shorter windows.
    delay, window = ("0", (0.3, 1.2)) if full else ("0.0002", (0.3, 1.5))
    rng = random.Random(20261122)
    source, sink, job = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(kafka_bootstrap, source, 4)
    create_topic(kafka_bootstrap, sink, 4)
    expected = produce_users(kafka_bootstrap, source, messages, 5000, 4)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, job, source, tmp_path / "state",
        **{"task.class": "tests.jobs.counting.SlowCounter",
           "task.processing.guarantee": guarantee, "task.commit.ms": 500,
           "emit.stream": f"kafka.{sink}"}))
    env = {"MILLPOND_TEST_DELAY": delay}
    runs: list[tuple[dict[str, int], str]] = []
    before: dict[str, int] = {}
    done_early = False
    for k in range(kills):
        proc = start_job(conf, "--bounded", env=env)
        seen: list[str] = []
        try:
            if k % ANYTIME == 1:
                time.sleep(rng.uniform(0.5, 2.5))
            else:
                seen = wait_for_line(proc, " ready: restored ", timeout=120)
                time.sleep(rng.uniform(*window))
            done_early = proc.poll() is not None
        finally:
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
        runs.append((before, "".join(seen) + out))
        assert not done_early, "the job finished before all kills; give it more input"
        before = {task: offs[-1][source]
                  for task, offs in checkpoint_history(kafka_bootstrap, job).items()}
    final = run_job(conf, "--bounded", env=env, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    runs.append((before, final.stdout + final.stderr))
    restores, replayed, resumed = _check_resumes(runs, checkpoint_history(kafka_bootstrap, job),
                                                 source)
    assert resumed >= 1, f"no restart resumed from a checkpoint > 0: no kill mattered {runs}"

    lost, duplicated = state_diff(dump_store(conf, "counts"), expected)
    isolation = "read_committed" if guarantee == "exactly-once" else "read_uncommitted"
    out_lost, out_dup = count_output_diff(kafka_bootstrap, sink, expected, isolation)
    tried = (f"{messages:,} msgs, {kills} seeded kills, {resumed} restarts resumed from a "
             f"checkpoint > 0, {restores} task restores ({replayed} replayed changelog records)")
    outcome = "exact" if lost == duplicated == 0 else "DIFF"
    if guarantee != "exactly-once":
        outcome += f"; output {isolation}: {out_lost} lost, {out_dup} duplicated"
    if guarantee == "exactly-once":
        report(f"SIGKILL x{kills} ({guarantee})", tried, lost + out_lost, duplicated + out_dup,
               "exact" if lost + out_lost + duplicated + out_dup == 0 else "DIFF")
    else:
        report(f"SIGKILL x{kills} ({guarantee})", tried, lost, duplicated, outcome)
    assert lost == 0 and out_lost == 0, (lost, out_lost)
    if guarantee == "exactly-once":
        assert (duplicated, out_dup) == (0, 0)
    elif guarantee == "effectively-once":
        assert duplicated == 0


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
    out_lost, out_dup = count_output_diff(kafka_bootstrap, sink, expected)
    report("aborted transaction (exactly-once)", "3rd commit fails abortably", lost + out_lost,
           duplicated + out_dup, "exact" if lost + out_lost + duplicated + out_dup == 0 else "DIFF")
    assert (lost, duplicated, out_lost, out_dup) == (0, 0, 0, 0)

"""Ctrl-C against real `millpond run` processes (README: "Stop with Ctrl-C (it commits and
exits 0); a second Ctrl-C exits at once")."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_util import (
    checkpoint_records,
    counting_job,
    create_topic,
    dump_store,
    hash_partition,
    produce_users,
    run_job,
    start_job,
    task_summaries,
    user_sequence,
    wait_for_line,
    write_properties,
)

NEVER_MS = 600_000  # a task.commit.ms that never fires within a test
READY = " ready: restored"  # a task's "ready" log line


def _job(bootstrap: str, name: str, source: str, state: Path, **extra: Any) -> dict[str, Any]:
    return counting_job(bootstrap, name, source, state, **{
        "task.class": "tests.jobs.coordinating.CoordinatingCounter",
        "task.commit.ms": NEVER_MS, **extra})


@pytest.mark.kafka
def test_ctrl_c_commits_what_was_processed_and_exits_0(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """SIGINT mid-stream (the timer never commits): exit 0, each task committed exactly the
    messages it processed, and a rerun resumes there: no message lost or counted twice."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    n = 3000
    expected = produce_users(kafka_bootstrap, source, n, 100, 2)
    seqs = user_sequence(n, 100, 2)
    conf = write_properties(tmp_path / "job.properties", _job(
        kafka_bootstrap, name, source, tmp_path / "s", **{"process.delay.s": 0.002}))
    proc = start_job(conf)  # >= 6 s of work
    try:
        wait_for_line(proc, READY)
        wait_for_line(proc, READY)
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-3000:]
    assert "signal 2: finishing the current batch, committing and closing" in out
    summaries = task_summaries(out)
    ckpts = checkpoint_records(kafka_bootstrap, name)
    # One commit per task, the one Ctrl-C made, at exactly what the task had processed.
    assert {p: [i for _, i in c] for p, c in ckpts.items()} == {
        p: [{source: done}] for p, (done, _) in summaries.items()}, out[-3000:]
    assert {p: commits for p, (_, commits) in summaries.items()} == {0: 1, 1: 1}
    done = {p: processed for p, (processed, _) in summaries.items()}
    assert 0 < sum(done.values()) < n, f"stopped mid-stream? {done}"
    state = dump_store(conf, "counts")
    for p in (0, 1):
        assert {u: c for u, c in state.items() if hash_partition(u, 2) == p} \
            == dict(Counter(seqs[p][:done[p]])), p
    rerun = run_job(conf, "--bounded", "--config-override", "process.delay.s=0", timeout=90)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {p: processed for p, (processed, _) in task_summaries(rerun.stderr).items()} == {
        p: len(seqs[p]) - done[p] for p in (0, 1)}, rerun.stderr[-3000:]
    assert dump_store(conf, "counts") == dict(expected)


@pytest.mark.kafka
def test_second_ctrl_c_during_a_slow_shutdown_exits_at_once(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The first SIGINT commits, then the task's close() takes two minutes; a second SIGINT
    ends the process at once with 130. The commit before it stands: a rerun with more input
    processes only the new messages and ends exact."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    expected = produce_users(kafka_bootstrap, source, 300, 10, 1)
    conf = write_properties(tmp_path / "job.properties", _job(
        kafka_bootstrap, name, source, tmp_path / "s",
        **{"close.delay.s": 120, "commit.at.offsets": "299"}))
    proc = start_job(conf)
    try:
        deadline = time.monotonic() + 60  # the commit asked for at the last message
        while checkpoint_records(kafka_bootstrap, name).get(0, []) == []:
            assert time.monotonic() < deadline, "no commit after offset 299"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        wait_for_line(proc, "closing slowly")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)  # close() would sleep for 120 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 130, out[-3000:]
    assert "second signal: exiting at once" in out
    assert [i for _, i in checkpoint_records(kafka_bootstrap, name)[0]] == [
        {source: 300}, {source: 300}]  # the one asked for, and the first Ctrl-C's
    expected += produce_users(kafka_bootstrap, source, 100, 10, 1)
    rerun = run_job(conf, "--bounded", "--config-override", "close.delay.s=0", timeout=90)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert task_summaries(rerun.stderr)[0][0] == 100, rerun.stderr[-3000:]
    assert dump_store(conf, "counts") == dict(expected)


def test_second_ctrl_c_during_start_up_exits_at_once(tmp_path: Path) -> None:
    """Ctrl-C twice while the task module is still importing (no broker is contacted yet):
    the process exits at once with 130 instead of finishing its start-up first."""
    conf = write_properties(tmp_path / "job.properties", counting_job(
        "127.0.0.1:9", "startup", "in", tmp_path / "s",
        **{"task.class": "tests.jobs.slow_import.SlowImportCounter"}))
    proc = start_job(conf, env={"MILLPOND_TEST_IMPORT_DELAY": "120"})
    try:
        wait_for_line(proc, "importing slowly")
        proc.send_signal(signal.SIGINT)
        time.sleep(1.0)  # two separate key presses, not one coalesced signal
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 130, out[-3000:]
    assert "second signal during start-up: exiting at once" in out


@pytest.mark.kafka
@pytest.mark.slow
def test_a_stop_that_hangs_dumps_every_thread_s_stack(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """SIGINT, then the task's close() takes 90 s: STOP_DUMP_S after the signal the process
    writes where each thread is, with the slow close() on the main thread's stack (a stop
    that hung in CI left no trace of where)."""
    from millpond.tasks.container import STOP_DUMP_S

    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    produce_users(kafka_bootstrap, source, 100, 10, 1)
    conf = write_properties(tmp_path / "job.properties", _job(
        kafka_bootstrap, name, source, tmp_path / "s", **{"close.delay.s": 90}))
    proc = start_job(conf)
    try:
        wait_for_line(proc, READY)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGINT)
        wait_for_line(proc, "closing slowly")
        dump = wait_for_line(proc, "(most recent call first)", timeout=STOP_DUMP_S + 20)
        assert time.monotonic() - signalled >= STOP_DUMP_S - 1, "dumped before it was due"
        stacks = dump + wait_for_line(proc, "close", timeout=10)
        assert any("coordinating.py" in line for line in stacks), "".join(stacks[-30:])
    finally:
        proc.kill()
        proc.communicate(timeout=30)

"""Process crashes at random moments and an aborted transaction: nothing lost or doubled."""

from __future__ import annotations

import ast
import json
import os
import random
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from millpond.tasks.faults import CRASH_LOG, POINTS
from tests.kafka_util import (
    MILLPOND,
    REPO,
    checkpoint_history,
    count_output_diff,
    counting_job,
    create_topic,
    dump_store,
    hash_partition,
    produce_users,
    ready_lines,
    run_job,
    state_diff,
    write_properties,
)

pytestmark = pytest.mark.kafka

COMMIT_PHASES = tuple(p for p in POINTS if p != "mid-batch")  # the commit protocol's points


# Every ANYTIME-th kill lands at a random moment after the start (start-up, restore or
# processing); the others a random moment after a commit that moved a task's input offset.
ANYTIME = 4


def _committed(bootstrap: str, job: str, source: str) -> dict[str, int]:
    """The last committed input offset of each task."""
    return {task: offs[-1][source] for task, offs in checkpoint_history(bootstrap, job).items()}


def _committed_yet(bootstrap: str, job: str, source: str) -> dict[str, int]:
    """Like :func:`_committed` while a job starts: the checkpoint topic may be missing or
    just created (no leader yet); that reads as nothing committed yet."""
    try:
        return _committed(bootstrap, job, source)
    except (KafkaException, KeyError, AssertionError):
        return {}


def _check_resumes(runs: list[tuple[dict[str, int], str]], history: dict[str, list[dict[str, int]]],
                   source: str) -> tuple[int, int, int]:
    """Check that each incarnation's tasks resume from a committed checkpoint no older than
    the last one committed before it started, and that every kill after a commit that moved
    an input offset is followed by a task resuming from that checkpoint (> 0).

    ``runs``: per incarnation, the input offset of each task committed before it started
    and its log. Returns (task restores, restores that replayed changelog records, kills
    after a commit, each followed by a resume from a checkpoint > 0)."""
    restores = replayed = 0
    firsts: list[dict[str, int]] = []  # per incarnation: task -> input offset it resumed at
    for i, (before, out) in enumerate(runs):
        first: dict[str, int] = {}
        for task, restored, inputs in ready_lines(out):
            restores += 1
            replayed += restored > 0
            if task in first:
                continue
            first[task] = at = inputs[source]
            committed = before.get(task, 0)
            assert at >= committed, (f"incarnation {i}: task {task} resumed at {inputs} but "
                                     f"{committed} was committed before it started")
            assert at == 0 or inputs in history.get(task, []), (
                f"incarnation {i}: task {task} resumed at {inputs}, not at a committed "
                f"checkpoint (last ones: {history.get(task, [])[-3:]})")
        firsts.append(first)
    after_commit = 0
    for i in range(1, len(runs)):  # runs[i][0]: committed when kill i - 1 had landed
        committed = {t: off for t, off in runs[i][0].items() if off > 0}
        if not committed:
            continue
        after_commit += 1
        resumed = [next((f[t] for f in firsts[i:] if t in f), None) for t in committed]
        assert any(at is not None and at > 0 for at in resumed), (
            f"kill {i - 1} landed after commits {committed}; no later task resumed from them")
    return restores, replayed, after_commit


def _start(conf: Path, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        return subprocess.Popen([MILLPOND, "run", "--config", str(conf), "--bounded"], cwd=REPO,
                                stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **env})


@pytest.mark.parametrize("guarantee", ["at-least-once", "effectively-once", "exactly-once"])
def test_random_sigkills(
    guarantee: str, full: bool, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """SIGKILL a counting job at seeded random moments, mostly soon after a commit, restart
    it each time, then let it finish. Every restart resumes from the last committed
    checkpoint, and every kill after a commit is followed by a resume from it (> 0). State:
    exact under every guarantee (at-least-once too: the fence makes it so). Output: exactly
    once read_committed under exactly-once, else nothing lost read_uncommitted (its
    duplicates measured and reported)."""
    sigkill_chaos(guarantee, full, report, kafka_bootstrap, topic_name, tmp_path)


def test_random_sigkills_with_backups(
    full: bool, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path, s3: Any,
) -> None:
    """The same SIGKILLs (effectively-once) with the stores backed up to a real S3 server
    every 500 ms, and every incarnation on an empty state dir of its own (a new machine):
    stores come back from snapshots (at least one restore downloads one; kills land
    during uploads too) plus the changelog tail, and the state stays exact."""
    sigkill_chaos("effectively-once", full, report, kafka_bootstrap, topic_name, tmp_path,
                  backup={**s3.properties(topic_name("job")),
                          "job.state.backup.interval.ms": 500})


def sigkill_chaos(
    guarantee: str, full: bool, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path, backup: dict[str, Any] | None = None,
) -> None:
    """:func:`test_random_sigkills`' run; with ``backup`` (``job.state.backup.*``), each
    incarnation and the final run use a new state dir."""
    messages, kills = (1_000_000, 20) if full else (60_000, 4)
    # The task is throttled (<= ~5k msg/s in CI, ~15k in the long version) so the kills
    # cannot finish the input however fast the machine is.
    delay = "0.00005" if full else "0.0002"
    rng = random.Random(20261122)
    source, sink, job = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(kafka_bootstrap, source, 4)
    create_topic(kafka_bootstrap, sink, 4)
    expected = produce_users(kafka_bootstrap, source, messages, 5000, 4)

    def config(name: str) -> Path:
        return write_properties(tmp_path / f"{name}.properties", counting_job(
            kafka_bootstrap, job, source, tmp_path / name,
            **{"task.class": "tests.jobs.counting.SlowCounter",
               "task.processing.guarantee": guarantee, "task.commit.ms": 500,
               "emit.stream": f"kafka.{sink}", **(backup or {})}))

    conf = config("state")
    env = {"MILLPOND_TEST_DELAY": delay}
    runs: list[tuple[dict[str, int], str]] = []
    before: dict[str, int] = {}
    after_progress = 0
    for k in range(kills):
        log = tmp_path / f"run-{k}.log"
        if backup is not None:  # a new machine
            conf = config(f"state-{k}")
        proc = _start(conf, log, env)
        try:
            if k % ANYTIME == 1:
                time.sleep(rng.uniform(0.5, 3.0))
            else:  # until a task committed progress, then a little longer
                deadline = time.monotonic() + 120
                while proc.poll() is None and not any(
                        off > before.get(t, 0)
                        for t, off in _committed_yet(kafka_bootstrap, job, source).items()):
                    assert time.monotonic() < deadline, (
                        f"no commit within 120 s:\n{log.read_text()[-3000:]}")
                    time.sleep(0.2)
                time.sleep(rng.uniform(0.0, 1.0))
                after_progress += 1
            assert proc.poll() is None, (
                f"the job ended before kill {k}; give it more input\n{log.read_text()[-3000:]}")
        finally:
            proc.kill()  # SIGKILL
            proc.wait(30)
        runs.append((before, log.read_text(errors="replace")))
        before = _committed(kafka_bootstrap, job, source)
    if backup is not None:
        conf = config("state-final")
    final = run_job(conf, "--bounded", env=env, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    runs.append((before, final.stdout + final.stderr))
    restores, replayed, after_commit = _check_resumes(
        runs, checkpoint_history(kafka_bootstrap, job), source)
    assert after_commit >= after_progress, (after_commit, after_progress)

    lost, duplicated = state_diff(dump_store(conf, "counts"), expected)
    isolation = "read_committed" if guarantee == "exactly-once" else "read_uncommitted"
    out_lost, out_dup = count_output_diff(kafka_bootstrap, sink, expected, isolation)
    tried = (f"{messages:,} msgs, {kills} seeded kills ({after_commit} after a commit, each "
             f"followed by a resume from it), {restores} task restores ({replayed} replayed "
             f"changelog records)")
    fault = f"SIGKILL x{kills} ({guarantee})"
    if backup is not None:
        downloads = sum(out.count("downloaded snapshot") for _, out in runs)
        tried += (f"; backups every 500 ms to S3, a new state dir per incarnation: "
                  f"{downloads} store restores from a snapshot")
        fault = f"SIGKILL x{kills} with backups, new state dirs ({guarantee})"
    if guarantee == "exactly-once":
        report(fault, tried, lost + out_lost, duplicated + out_dup,
               "exact" if lost + out_lost + duplicated + out_dup == 0 else "DIFF")
    else:
        report(fault, tried, lost, duplicated,
               f"{'exact' if lost == duplicated == 0 else 'DIFF'}; output {isolation}: "
               f"{out_lost} lost, {out_dup} duplicated")
    assert lost == 0 and out_lost == 0, (lost, out_lost)
    # State is exact under every guarantee, at-least-once too: the fence makes it so.
    assert duplicated == 0, f"{duplicated} updates counted twice in the state ({guarantee})"
    if guarantee == "exactly-once":
        assert out_dup == 0, f"{out_dup} output records duplicated read_committed"
    if backup is not None:
        assert downloads > 0, "no restore started from a snapshot"


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


def _crash_line(log: str, point: str) -> tuple[str, dict[str, int], dict[str, int]]:
    """(task, input offsets committed before, offsets being committed) of the crash point's
    last words in a killed run's log."""
    m = re.search(rf"{CRASH_LOG} {point} \(task (partition-\d+), input (\{{[^}}]*\}}) -> "
                  rf"(\{{[^}}]*\}})\)", log)
    assert m, f"{point}: the crash point did not say where it fired:\n{log[-3000:]}"
    return m.group(1), ast.literal_eval(m.group(2)), ast.literal_eval(m.group(3))


def _produce_once(bootstrap: str, topic: str, partitions: int) -> Counter[str]:
    """One view of a user seen only once, first in each partition: the first record of each
    changelog partition is then that user's only one (a restore that skips it loses it)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    once = Counter(f"user-{1000 + p}" for p in range(partitions))
    for user in once:
        producer.produce(topic, key=user.encode(), value=json.dumps({"user_id": user}),
                         partition=hash_partition(user, partitions))
    assert producer.flush(30) == 0
    return once


@pytest.mark.parametrize("guarantee", ["effectively-once"])
def test_sigkill_at_every_commit_phase_restores_from_the_changelog(
    guarantee: str, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """SIGKILL at each crash point of the commit protocol, each time on a commit that moves
    input (``MILLPOND_CRASH_AT=<point>:2:moved``: the second such commit of the run), every
    restart on an empty state dir with no backups, and a 4-entry object cache that writes
    dirty entries down by eviction between commits (each killed run's log shows one), and
    a user seen once heading each changelog partition: each store comes back from its
    changelog alone, restored up to the checkpoint that the killed run committed
    last, so a checkpoint naming changelog offsets its commit did not cover loses updates
    here. State exact; output nothing lost read_uncommitted (duplicates reported)."""
    source, sink, job = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(kafka_bootstrap, source, 4)
    create_topic(kafka_bootstrap, sink, 4)

    def config(state: str) -> Path:
        return write_properties(tmp_path / f"{state}.properties", counting_job(
            kafka_bootstrap, job, source, tmp_path / state,
            **{"task.class": "tests.jobs.counting.EvictingCounter",
               "task.processing.guarantee": guarantee, "task.commit.ms": 50,
               # ~30 users a task, 4 cached: dirty entries go down by eviction between
               # commits too (each run's log proves it), not only in the commit's flush
               "stores.counts.object.cache.size": 4,
               "emit.stream": f"kafka.{sink}"}))

    # 1500 inputs a run at <= 1000 a poll and ~0.5 ms each: several commits follow the
    # first commit that moves input, so each kill is certain to come
    env = {"MILLPOND_TEST_DELAY": "0.0005"}
    # A first run without a kill: every later restart has committed changelog records to
    # restore (a kill can land before its own run's first commit)
    expected = _produce_once(kafka_bootstrap, source, 4)
    expected += produce_users(kafka_bootstrap, source, 1500, 120, 4)
    warm = run_job(config("state-warm"), "--bounded", env=env, timeout=120)
    assert warm.returncode == 0, (warm.stdout + warm.stderr)[-3000:]
    replayed: list[int] = []
    for k, point in enumerate(COMMIT_PHASES):
        expected += produce_users(kafka_bootstrap, source, 1500, 120, 4)
        run = run_job(config(f"state-{k}"), "--bounded",
                      env={**env, "MILLPOND_CRASH_AT": f"{point}:2:moved"}, timeout=120)
        log = run.stdout + run.stderr
        assert run.returncode == -signal.SIGKILL, (
            f"{point}: expected a SIGKILL, got exit {run.returncode}:\n{log[-3000:]}")
        assert "downloaded snapshot" not in log
        assert "dirty cache entry evicted" in log, f"{point}: no dirty entry evicted"
        task, before, after = _crash_line(log, point)
        assert after[source] > before[source], (point, task, before, after)
        # an empty state dir: the stores came back from the changelog
        replayed.append(sum(r[1] for r in ready_lines(log)))
    final_conf = config("state-final")
    final = run_job(final_conf, "--bounded", env=env, timeout=120)
    assert final.returncode == 0, (final.stdout + final.stderr)[-3000:]
    replayed.append(sum(r[1] for r in ready_lines(final.stdout + final.stderr)))

    state = dump_store(final_conf, "counts")
    lost, duplicated = state_diff(state, expected)
    out_lost, out_dup = count_output_diff(kafka_bootstrap, sink, expected, "read_uncommitted")
    report(f"SIGKILL at every commit phase, restores from the changelog only ({guarantee})",
           f"{len(COMMIT_PHASES)} kills, one per commit phase, each on a commit that moved input; each "
           f"restart on an empty state dir, no backups ({sum(replayed):,} changelog records "
           "replayed)", lost, duplicated,
           f"{'exact' if state == dict(expected) else 'DIFF'}; output read_uncommitted: "
           f"{out_lost} lost, {out_dup} duplicated")
    assert (lost, duplicated) == (0, 0), (
        f"store differs from the reference count: {lost} updates lost, {duplicated} duplicated")
    assert state == dict(expected)
    assert out_lost == 0, f"{out_lost} output records lost"
    # every run after the first (each killed one, and the final run) restored from the
    # changelog
    assert all(n > 0 for n in replayed), (
        f"changelog records replayed per restart: {dict(zip([*COMMIT_PHASES, 'final'], replayed, strict=True))}")

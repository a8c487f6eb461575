"""A zombie under exactly-once, at a known point: paused mid-transaction, its task moved to
another process, resumed. Its commit is refused (fenced), it keeps running, and the
``read_committed`` output holds each input's record exactly once.

The seeded chaos of ``test_zombies.py`` covers pauses at random points; this test pins one:
the process freezes itself (SIGSTOP, ``tests.jobs.counting.PausingCounter``) right after it
processed and emitted an input in the middle of an open transaction that already reached
the broker, and is resumed (SIGCONT) only once the new owner is processing.
"""

from __future__ import annotations

import signal
import subprocess
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
    millpond,
    produce_users,
    ready_lines,
    start_job,
    wait_for_line,
    write_properties,
)

pytestmark = pytest.mark.kafka

SESSION_MS = 6000  # the broker's group.min.session.timeout.ms: the pause outlasts it
PAUSE_AT = 450  # input offset after which the first process freezes


def _committed(bootstrap: str, job: str, source: str) -> int:
    """partition-0's committed input offset (-1 if it has no checkpoint yet)."""
    history = checkpoint_history(bootstrap, job).get("partition-0", [])
    return history[-1][source] if history else -1


def _wait_committed(bootstrap: str, job: str, source: str, at_least: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (got := _committed(bootstrap, job, source)) < at_least:
        assert time.monotonic() < deadline, f"partition-0 committed {got}, not {at_least}"
        time.sleep(0.5)
    return got


def _finish(proc: subprocess.Popen[str], seen: list[str], timeout: float = 60) -> tuple[int, str]:
    """SIGTERM ``proc`` (SIGCONT first, in case it is stopped); its exit code and whole log."""
    proc.send_signal(signal.SIGCONT)
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
    return proc.returncode, "".join(seen) + out


def test_paused_process_is_fenced_when_resumed(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, sink, job = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, sink, 1)

    def config(name: str) -> Path:
        props = counting_job(
            kafka_bootstrap, job, source, tmp_path / f"state-{name}",
            **{"task.class": "tests.jobs.counting.PausingCounter",
               "task.processing.guarantee": "exactly-once", "task.commit.ms": 200,
               "emit.stream": f"kafka.{sink}",
               "systems.kafka.consumer.session.timeout.ms": SESSION_MS,
               "systems.kafka.consumer.heartbeat.interval.ms": 1000})
        del props["systems.kafka.consumer.group.instance.id"]  # two members of one group
        return write_properties(tmp_path / f"{name}.properties", props)

    expected = produce_users(kafka_bootstrap, source, 300, 20, 1)
    zombie = start_job(config("a"), env={"MILLPOND_TEST_PAUSE_AT": str(PAUSE_AT),
                                         "MILLPOND_TEST_DELAY": "0.002"})
    owner: subprocess.Popen[str] | None = None
    zombie_seen: list[str] = []
    owner_seen: list[str] = []
    try:
        zombie_seen += wait_for_line(zombie, " ready: restored ", timeout=120)
        _wait_committed(kafka_bootstrap, job, source, 300, timeout=60)
        # More input: the zombie freezes at PAUSE_AT, in the middle of a transaction that
        # holds the outputs of the inputs since its last commit.
        expected += produce_users(kafka_bootstrap, source, 300, 20, 1)
        zombie_seen += wait_for_line(zombie, f"pausing at offset {PAUSE_AT}", timeout=60)
        last_commit = _committed(kafka_bootstrap, job, source)
        assert 300 <= last_commit <= PAUSE_AT, last_commit

        # A second process takes the task over once the zombie's session has expired.
        owner = start_job(config("b"))
        owner_seen += wait_for_line(owner, " ready: restored ", timeout=120)
        (_, _, resumed_at), = ready_lines("".join(owner_seen))
        assert resumed_at == {source: last_commit}, "the new owner resumes at the last commit"
        _wait_committed(kafka_bootstrap, job, source, 600, timeout=60)

        # The zombie resumes: it goes on with its batch and its commit, and is fenced.
        zombie.send_signal(signal.SIGCONT)
        resumed_from = len(zombie_seen)
        zombie_seen += wait_for_line(zombie, "transaction of task partition-0 aborted",
                                     timeout=60)
        refused = zombie_seen[-1]
        assert "nothing of it is visible" in refused and "was fenced" in refused, (
            "".join(zombie_seen[resumed_from:]))
        time.sleep(2)  # it handles the lost partition and rejoins the group
        assert zombie.poll() is None, "the fenced process must keep running"
    finally:
        zombie_rc, zombie_log = _finish(zombie, zombie_seen)
        owner_rc, owner_log = _finish(owner, owner_seen) if owner is not None else (None, "")
    assert zombie_rc == 0, zombie_log[-3000:]
    assert owner_rc == 0, owner_log[-3000:]
    for name, text in (("zombie", zombie_log), ("owner", owner_log)):
        assert "Traceback" not in text, f"{name}:\n{text[-3000:]}"

    # No commit of the zombie's after the new owner's: the committed input offsets never
    # go back (its commit would have checkpointed offsets below 600 after the owner's 600).
    committed = [c[source] for c in checkpoint_history(kafka_bootstrap, job)["partition-0"]]
    assert committed == sorted(committed) and committed[-1] == 600, committed
    lost, duplicated = count_output_diff(kafka_bootstrap, sink, expected, "read_committed")
    # Read uncommitted, the zombie's aborted outputs (its open transaction, which reached
    # the broker before the pause) are there too, duplicating the new owner's: they are
    # what the fence and read_committed keep out.
    _, aborted = count_output_diff(kafka_bootstrap, sink, expected, "read_uncommitted")
    fresh = config("fresh")  # the state as the changelog holds it, restored anew
    assert millpond("restore", "--config", str(fresh)).returncode == 0
    state = dump_store(fresh, "counts")
    report("zombie fenced (exactly-once)",
           f"SIGSTOP mid-transaction after offset {PAUSE_AT} (last commit {last_commit}), "
           f"task moved, SIGCONT; {aborted} aborted output records seen read_uncommitted",
           lost, duplicated, "fenced, kept running; read_committed output exact"
           if lost == duplicated == 0 and state == dict(expected) else "DIFF")
    assert aborted >= 1, "the zombie's transaction never reached the broker: nothing was fenced"
    assert (lost, duplicated) == (0, 0)
    assert state == dict(expected)

"""Static membership against a real broker (README: "Setting
``systems.kafka.consumer.group.instance.id`` makes a restarted process get its partitions
back at once ... A static member does not leave the group on shutdown")."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.kafka_util import (
    OutputLines,
    assigned_partitions,
    counting_job,
    create_topic,
    produce_users,
    start_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

ALL = {0, 1, 2, 3}
READY = " ready: restored"  # a task's "ready" log line
REBALANCE_LINES = ("assigned partitions", "revoking partitions", "were lost")


def _members(bootstrap: str, group: str) -> dict[str | None, set[int]]:
    """group.instance.id -> assigned partitions of each member the broker lists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return {m.group_instance_id: {tp.partition for tp in m.assignment.topic_partitions}
            for m in desc.members}


def _nonempty(lines: list[str]) -> set[int]:
    """Every partition the ``assigned partitions`` lines named."""
    return set().union(*assigned_partitions(lines))


def _stop(proc: subprocess.Popen[str] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


def _two_static_members(bootstrap: str, name: str, source: str, tmp_path: Path,
                        session_ms: int) -> tuple[Path, Path]:
    """Configs of processes A and B of one job, static members ``<name>-a`` / ``-b``."""
    create_topic(bootstrap, source, 4)
    produce_users(bootstrap, source, 400, 40, 4)
    base: dict[str, Any] = counting_job(bootstrap, name, source, tmp_path / "a", **{
        "systems.kafka.consumer.session.timeout.ms": session_ms,
        "systems.kafka.consumer.heartbeat.interval.ms": 500})
    a = write_properties(tmp_path / "a.properties", {
        **base, "systems.kafka.consumer.group.instance.id": f"{name}-a"})
    b = write_properties(tmp_path / "b.properties", {
        **base, "systems.kafka.consumer.group.instance.id": f"{name}-b",
        "job.logged.store.base.dir": str(tmp_path / "b")})
    return a, b


def _start_a_then_b(a_conf: Path, b_conf: Path) -> tuple[
        subprocess.Popen[str], OutputLines, subprocess.Popen[str], OutputLines, set[int]]:
    """Start A (it takes all four tasks), then B; return both and B's partitions once
    every task of both is ready."""
    a = start_job(a_conf)
    a_out = OutputLines(a)
    a_out.wait_for("A's four tasks ready", lambda ls: sum(READY in x for x in ls) == 4)
    b = start_job(b_conf)
    b_out = OutputLines(b)
    b_lines = b_out.wait_for("B assigned partitions", lambda ls: bool(_nonempty(ls)))
    b_parts = _nonempty(b_lines)
    b_out.wait_for("B's tasks ready", lambda ls: sum(READY in x for x in ls) == len(b_parts))
    a_out.wait_for(f"A revoking {sorted(b_parts)}",
                   lambda ls: f"revoking partitions {sorted(b_parts)}" in "".join(ls))
    assert b_parts and b_parts != ALL, b_parts
    return a, a_out, b, b_out, b_parts


def test_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A and B are static members with two tasks each. A stops (SIGTERM) and starts again
    within session.timeout.ms: while it is down the broker still lists it with its
    partitions; back, it is assigned exactly those again, and B sees no rebalance at all."""
    source, name = topic_name("in"), topic_name("job")
    session_ms = 30000
    a_conf, b_conf = _two_static_members(kafka_bootstrap, name, source, tmp_path, session_ms)
    group = f"{name}-1"
    a = b = a2 = None
    try:
        a, a_out, b, b_out, b_parts = _start_a_then_b(a_conf, b_conf)
        a_parts = ALL - b_parts
        assert _members(kafka_bootstrap, group) == {f"{name}-a": a_parts, f"{name}-b": b_parts}
        b_seen = len(b_out.lines)
        a.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert a.wait(timeout=60) == 0, a_out.text()[-3000:]
        # Down, but not gone: the broker keeps A's membership and its assignment.
        assert _members(kafka_bootstrap, group) == {f"{name}-a": a_parts, f"{name}-b": b_parts}
        a2 = start_job(a_conf)
        a2_out = OutputLines(a2)
        lines = a2_out.wait_for("restarted A assigned", lambda ls: bool(_nonempty(ls)))
        assert time.monotonic() - stopped < session_ms / 1000, "restart took too long"
        assert [s for s in assigned_partitions(lines) if s] == [a_parts], lines[-20:]
        a2_out.wait_for("restarted A's tasks ready",
                        lambda ls: sum(READY in x for x in ls) == len(a_parts))
        time.sleep(1.5)  # three of B's heartbeats: a rebalance would have reached B by now
        assert _members(kafka_bootstrap, group) == {f"{name}-a": a_parts, f"{name}-b": b_parts}
        b_during = b_out.lines[b_seen:]
        assert not [x for x in b_during if any(r in x for r in REBALANCE_LINES)], b_during
        assert not [x for x in a2_out.lines if "revoking partitions" in x], a2_out.lines
        for proc in (a2, b):
            proc.send_signal(signal.SIGTERM)
        assert a2.wait(timeout=60) == 0, a2_out.text()[-3000:]
        assert b.wait(timeout=60) == 0, b_out.text()[-3000:]
    finally:
        for proc in (a, b, a2):
            _stop(proc)


def test_static_member_shutdown_does_not_leave_the_group(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A static member that stops cleanly stays in the group: its partitions are not moved
    to B when it exits, only once its session (10 s) has expired."""
    source, name = topic_name("in"), topic_name("job")
    a_conf, b_conf = _two_static_members(kafka_bootstrap, name, source, tmp_path, 10000)
    group = f"{name}-1"
    a = b = None
    try:
        a, a_out, b, b_out, b_parts = _start_a_then_b(a_conf, b_conf)
        a_parts = ALL - b_parts
        b_seen = len(b_out.lines)
        a.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert a.wait(timeout=60) == 0, a_out.text()[-3000:]
        assert "revoking partitions" in a_out.text()  # its tasks committed and closed
        assert _members(kafka_bootstrap, group) == {f"{name}-a": a_parts, f"{name}-b": b_parts}
        assert not _nonempty(b_out.lines[b_seen:]), b_out.lines[b_seen:]
        b_out.wait_for(f"B assigned A's partitions {sorted(a_parts)}",
                       lambda ls: _nonempty(ls[b_seen:]) == a_parts, timeout=60)
        moved_after = time.monotonic() - stopped
        # Only the session's expiry moved them: 10 s after A's last heartbeat, which was
        # about a heartbeat (0.5 s) before the SIGTERM; 5 s leaves room for late heartbeats.
        assert moved_after > 5.0, f"A's partitions moved {moved_after:.1f} s after it stopped"
        assert _members(kafka_bootstrap, group) == {f"{name}-b": ALL}
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=60) == 0, b_out.text()[-3000:]
    finally:
        for proc in (a, b):
            _stop(proc)

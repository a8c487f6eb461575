"""A dev server's stale state file naming a live process that is not the server: `stop`
leaves that process alone (Kafka, S3Proxy and Spark alike), `status` does not count it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from millpond.dev import procs
from millpond.dev.kafka import LocalKafka
from millpond.dev.s3 import LocalS3
from millpond.dev.spark import LocalSparkCluster


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A live process in a session of its own (as `setsid sleep` would be) that millpond
    did not start."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _survives(proc: subprocess.Popen[bytes]) -> bool:
    time.sleep(0.2)
    return proc.poll() is None and procs.alive(proc.pid)


def test_spark_stop_leaves_a_stranger_alone(tmp_path: Path,
                                            stranger: subprocess.Popen[bytes]) -> None:
    # A state file from before start tokens (a plain pid list), and one in today's format
    # whose start token is another process's: neither may be signalled. Before, stop()
    # ran os.killpg on any live pid in cluster.json.
    for state in ({"pids": [stranger.pid], "port": 1, "web_port": 2},
                  {"daemons": [{"pid": stranger.pid, "started": "proc:1",
                                "markers": ["org.apache.spark.deploy.master.Master"]}]}):
        (tmp_path / "cluster.json").write_text(json.dumps(state))
        cluster = LocalSparkCluster(data_dir=tmp_path, port=1, web_port=2)
        assert cluster.status().pids == []
        assert cluster.stop(timeout=1) is False
        assert _survives(stranger), "stop() signalled a process it did not start"


def test_kafka_and_s3_stop_leave_a_stranger_alone(tmp_path: Path,
                                                  stranger: subprocess.Popen[bytes]) -> None:
    (tmp_path / "kafka").mkdir()
    (tmp_path / "kafka" / "broker.json").write_text(json.dumps({"pid": stranger.pid}))
    kafka = LocalKafka(data_dir=tmp_path / "kafka", port=1, controller_port=2)
    kafka_state = kafka._state_path()
    kafka_state.write_text(json.dumps({"pid": stranger.pid, "port": 1}))
    assert not kafka.status().running and kafka.stop(timeout=1) is False
    (tmp_path / "s3").mkdir()
    s3 = LocalS3(data_dir=tmp_path / "s3", port=1)
    s3._state_path().write_text(json.dumps({"pid": stranger.pid, "port": 1}))
    assert not s3.status().running and s3.stop(timeout=1) is False
    assert _survives(stranger)


def test_a_look_alike_started_at_another_time_is_not_ours(tmp_path: Path) -> None:
    """A process whose command line holds the markers but which started later than the state
    file says (the pid was reused) is not signalled; with the right start token it is."""
    marker = f"org.gaul.s3proxy.Main {tmp_path}"
    proc = subprocess.Popen(["sh", "-c", f"sleep 300; : {marker}"], start_new_session=True)
    try:
        token = procs.start_token(proc.pid)
        assert token is not None
        other = token.split(":")[0] + ":" + "12345"
        assert procs.is_ours(proc.pid, [marker], token)
        assert not procs.is_ours(proc.pid, [marker], other)
        assert procs.terminate([(proc.pid, [marker], other)], 1) == []
        assert _survives(proc)
        assert procs.terminate([(proc.pid, [marker], token)], 5, group=True) == [proc.pid]
        assert proc.wait(timeout=10) is not None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_without_proc_ps_answers_and_without_either_nothing_is_ours(
        monkeypatch: pytest.MonkeyPatch, stranger: subprocess.Popen[bytes],
        tmp_path: Path) -> None:
    via_proc = procs.command_line(stranger.pid)
    monkeypatch.setattr(procs, "_PROC", tmp_path / "no-proc")  # as on macOS
    assert procs.command_line(stranger.pid) == via_proc == "sleep 300"
    assert (procs.start_token(stranger.pid) or "").startswith("ps:")
    assert procs.is_ours(stranger.pid, ["sleep"], procs.start_token(stranger.pid))
    monkeypatch.setattr(procs, "_ps", lambda pid, field: None)  # and no ps either
    assert procs.command_line(stranger.pid) is None
    assert not procs.is_ours(stranger.pid, ["sleep"], None), "unknown is not ours"
    assert _survives(stranger)

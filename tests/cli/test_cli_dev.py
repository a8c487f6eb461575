"""The installed ``millpond`` console script answers --help and reports the dev broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Broker

MILLPOND = str(Path(sys.executable).with_name("millpond"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MILLPOND, *args], capture_output=True, text=True, timeout=60)


def test_help_lists_commands() -> None:
    out = run("--help")
    assert out.returncode == 0, out.stderr
    assert "dev" in out.stdout
    sub = run("dev", "kafka", "--help")
    assert sub.returncode == 0
    for command in ("start", "stop", "status"):
        assert command in sub.stdout


@pytest.mark.kafka
def test_status_reports_running_local_broker(kafka_broker: Broker, tmp_path: Path) -> None:
    from millpond.dev.kafka import LocalKafka

    if isinstance(kafka_broker.local, LocalKafka):
        local = kafka_broker.local
        out = run("dev", "kafka", "--data-dir", str(local.data_dir), "status")
        assert out.returncode == 0, out.stdout + out.stderr
        assert f"bootstrap={local.bootstrap}" in out.stdout
    idle = run("dev", "kafka", "--data-dir", str(tmp_path / "none"), "--port", "19092", "status")
    assert idle.returncode == 1
    assert "not running" in idle.stdout and "127.0.0.1:19092" in idle.stdout

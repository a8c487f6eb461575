"""The tests' broker policy, run as pytest runs it (a child pytest with the suite's own
conftest as a plugin): ``MILLPOND_TEST_BOOTSTRAP`` is picked first; a broker that cannot be
started fails a test under ``CI=true`` and skips it elsewhere, with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = '''
import pytest

@pytest.mark.kafka
def test_probe(kafka_bootstrap):
    print("BOOTSTRAP=" + kafka_bootstrap)
'''


def child_pytest(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    # PATH without java: the private broker cannot start; no Docker engine answers here
    # (a DOCKER_HOST that refuses), so the last choice is the one that fails.
    base = {k: v for k, v in os.environ.items()
            if k not in ("CI", "MILLPOND_TEST_BOOTSTRAP", "JAVA_HOME")}
    base.update(PATH=str(Path(sys.executable).parent) + ":/nonexistent",
                DOCKER_HOST="tcp://127.0.0.1:1", **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-rs", "-s",
         "--rootdir", str(tmp_path), "-c", "/dev/null", "-p", "no:cacheprovider", "-o", "markers=kafka", str(probe)],
        cwd=REPO, env=base, capture_output=True, text=True, timeout=120)


def test_the_bootstrap_variable_is_picked_first(tmp_path: Path) -> None:
    done = child_pytest(tmp_path, MILLPOND_TEST_BOOTSTRAP="127.0.0.1:19")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BOOTSTRAP=127.0.0.1:19" in done.stdout


def test_no_broker_fails_under_ci_and_skips_elsewhere(tmp_path: Path) -> None:
    ci = child_pytest(tmp_path, CI="true")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    # pytest.fail in a fixture: the test errors at setup (an error fails the run as a
    # failure does); it is not skipped
    assert "1 error" in ci.stdout and "skipped" not in ci.stdout, ci.stdout
    assert "CI=true and no Kafka broker could be started" in ci.stdout, ci.stdout
    assert "Java 17 or newer is required" in ci.stdout, ci.stdout

    local = child_pytest(tmp_path)
    assert local.returncode == 0, local.stdout + local.stderr
    assert "1 skipped" in local.stdout, local.stdout
    assert "no Kafka broker could be started" in local.stdout, local.stdout

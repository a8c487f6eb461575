"""``make demo`` end to end, against the test's private broker instead of 127.0.0.1:9092.

The demo runs as ``make demo`` runs it (``python -m examples.demo``) with four options:
``--bootstrap`` (the test's broker), ``--state-dir`` (a tmp dir), ``--no-spark-audit``
(Spark's start-up alone would take most of a minute: the demo with its audit step is its own
test, marked spark, in ``make test-slow``) and ``--metrics-port 0`` (the jobs serve Prometheus metrics). Its
output is checked for what a new user should not meet: raw librdkafka lines, Spark WARN
lines, progress lines that do not say what they count.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.kafka_util import REPO

pytestmark = pytest.mark.kafka


def run_demo(bootstrap: str, state: Path, timeout: float = 180,
             audit: bool = False) -> tuple[int, str]:
    """Run the demo to its end (its process group is killed if it overruns ``timeout``);
    with ``audit`` its step 6 runs ``millpond spark audit`` as ``make demo`` does."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.demo", "--bootstrap", bootstrap,
         "--state-dir", str(state), *([] if audit else ["--no-spark-audit"]),
         "--metrics-port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the demo and the jobs it started
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f"the demo did not finish within {timeout:.0f} s:\n{out[-4000:]}")
    return proc.returncode, out


def assert_readable(out: str) -> None:
    """What a new user reads: no raw librdkafka line, no Spark WARN, and restore progress
    that says what it counts, per store partition."""
    lines = out.splitlines()
    # librdkafka's own form (%4|1700000000.123|GETPID|rdkafka#producer-1| ...) or confluent-
    # kafka's arguments printed bare (GETPID [rdkafka#producer-1] [thrd:main]: ...); a client's
    # line must come as a labelled millpond.kafka record.
    raw = [line for line in lines if re.match(r"\s*%\d\|", line)
           or (re.search(r"#(producer|consumer)-\d+", line) and "millpond.kafka: " not in line)]
    assert raw == [], out[-6000:]
    assert [line for line in lines if re.search(r"\bWARN\b", line)] == [], out[-6000:]
    for store in ("hourly-counts", "event-time"):
        for p in range(4):
            assert re.search(rf"^restore {store} p{p}: ([\d,]+)/\1 records, done in [\d.]+ s$",
                             out, re.M), out[-6000:]
    # not click's bare labels of before ("hourly-counts demo-...-changelog[2]")
    assert not re.search(r"^\S+ \S+-changelog\[\d+\]$", out, re.M), out[-6000:]


def test_the_audit_line_comes_from_the_audit_report_alone() -> None:
    """The demo's audit line is read from `millpond spark audit`'s JSON on stdout; anything
    else there (Ivy's ':: loading settings ::' once made it 'spark audit ok: }') fails."""
    from examples.demo import DemoFailed, audit_summary

    report = {"store": "hourly-counts", "ok": True, "seconds": 10.5,
              "totals": {"matching": 68, "missing": 0, "extra": 0, "differing": 0},
              "partitions": {}, "samples": []}
    text = json.dumps(report, indent=2) + "\n"
    assert audit_summary(0, text) == ("68 keys match the changelog (0 missing, 0 extra, "
                                      "0 differing)")
    with pytest.raises(DemoFailed, match="no JSON report"):
        audit_summary(0, ":: loading settings :: file = /x/ivysettings.xml\n" + text)
    diverged = {**report, "ok": False, "totals": {**report["totals"], "differing": 2}}
    with pytest.raises(DemoFailed, match=r"differ: 68 keys match .* 2 differing"):
        audit_summary(1, json.dumps(diverged))
    with pytest.raises(DemoFailed, match="exited 2"):
        audit_summary(2, "", "Error: no store 'x'")


def topics_of(bootstrap: str, run_id: str) -> list[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return sorted(t for t in admin.list_topics(timeout=30).topics if run_id in t)


def test_demo_passes_against_the_test_broker(kafka_bootstrap: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    began = time.monotonic()
    code, out = run_demo(kafka_bootstrap, state)
    took = time.monotonic() - began
    (tmp_path / "demo.log").write_text(out)
    lines = out.rstrip().splitlines()
    assert code == 0 and lines, out[-6000:]
    verdict = lines[-1]
    assert verdict.startswith("demo: PASS "), out[-6000:]
    # All six steps ran, and the verdict is about every user and hourly count.
    assert [f"[{n}/6]" in out for n in range(1, 7)] == [True] * 6, out[-6000:]
    users = re.search(r"demo: PASS (\d+)/(\d+) users and (\d+) hourly counts match", verdict)
    assert users is not None and users[1] == users[2] and int(users[1]) > 0, verdict
    assert "spark audit skipped (--no-spark-audit)" in verdict
    assert_readable(out)
    # --metrics-port turned the Prometheus reporter on in both job runs (port 0: a free one).
    assert len(re.findall(r"metrics: Prometheus metrics at http://127\.0\.0\.1:[1-9]\d*/metrics",
                          out)) == 2, out[-6000:]

    # It ran against the test's broker with its stores under tmp_path: the lost store it
    # deleted in step 3 was there, and passing removed the run's state and topics.
    match = re.search(r"job (demo-hourly-page-views-([0-9a-f]{6}))", out)
    assert match is not None, out[:3000]
    job, run_id = match[1], match[2]
    assert f"rm -r {state / job / 'hourly-counts' / 'partition-2'}" in out, out[-6000:]
    assert state.is_dir() and not (state / job).exists()
    assert not (REPO / "state" / job).exists()
    deadline = time.monotonic() + 30
    while (left := topics_of(kafka_bootstrap, run_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"the demo left its topics behind: {left}"
    print(f"demo took {took:.1f} s: {verdict}")


@pytest.mark.spark
def test_demo_audits_its_store_with_spark(kafka_bootstrap: str, tmp_path: Path) -> None:
    """``make demo`` as it runs by default: step 6 audits the restored store against its
    changelog with ``millpond spark audit`` (local Spark), and the verdict carries the
    audit's own count of matching keys, none missing, extra or differing."""
    code, out = run_demo(kafka_bootstrap, tmp_path / "state", timeout=420, audit=True)
    (tmp_path / "demo.log").write_text(out)
    assert code == 0, out[-6000:]
    verdict = out.rstrip().splitlines()[-1]
    audit = re.search(r"spark audit ok: (\d+) keys match the changelog "
                      r"\(0 missing, 0 extra, 0 differing\)", verdict)
    assert verdict.startswith("demo: PASS ") and audit is not None, out[-6000:]
    assert int(audit[1]) > 0, verdict  # the store's keys: its open hours, not every count
    assert_readable(out)

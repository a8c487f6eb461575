"""Smoke test of the benchmark harness: `benchmarks.run --quick` counts correctly and reports.

It times nothing: it checks that `python -m benchmarks.run` produces its input, runs the
millpond count at every guarantee, verifies each final state against the reference and
writes results.json / results.md (in a temp dir, never over benchmarks/results.*).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_util import REPO

pytestmark = pytest.mark.kafka

GUARANTEES = ("at-least-once", "effectively-once", "exactly-once")


def test_quick_count_writes_correct_results(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks.run", "--quick", "--runs", "1", "--only", "count",
           "--systems", "millpond", "--bootstrap", kafka_bootstrap, "--out-dir", str(out),
           "--work-dir", str(tmp_path / "work")]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    results = json.loads((out / "results.json").read_text())
    assert results["problems"] == [], results["problems"]
    assert results["meta"]["sizes"]["messages"] == 20_000
    for guarantee in GUARANTEES:
        entry = results["count"][f"millpond {guarantee}"]
        assert entry["good_runs"] == 1 and not entry["wrong"] and not entry["failed"], entry
        run = entry["runs"][0]
        assert run["correct"] is True
        assert run["total"] == 20_000 and run["keys"] == 2_000
        assert run["msgs_per_s"] > 0 and run["cpu_s"] > 0
    markdown = (out / "results.md").read_text()
    assert "count: millpond exactly-once" in markdown
    assert "**WRONG**" not in markdown and "FAILED" not in markdown

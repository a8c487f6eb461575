"""Smoke test of benchmarks/restore_scaling.py: it restores each size fully and reports RSS.

Times nothing; the figures themselves are `make bench`'s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_util import REPO

pytestmark = pytest.mark.kafka


def test_restore_scaling_restores_every_record(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "scaling.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.restore_scaling", "--bootstrap", kafka_bootstrap,
         "--sizes", "2000,6000", "--json-out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["sizes"] == [2000, 6000]
    assert [r["records"] for r in result["runs"]] == [2000, 6000]
    for run in result["runs"]:
        assert run["maxrss_mb"] > 10 and run["records_per_s"] > 0
    assert result["rss_growth"] == pytest.approx(
        max(r["maxrss_mb"] for r in result["runs"]) / min(r["maxrss_mb"] for r in result["runs"]))

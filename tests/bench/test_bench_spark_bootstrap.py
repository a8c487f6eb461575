"""Smoke test of the Spark bootstrap benchmark through the harness (`benchmarks.run --quick
--only spark`): it bootstraps 20k Parquet rows, checks the changelog holds every record, and
reports records/s in results.json and the README table. It times nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_util import REPO

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_quick_spark_bootstrap_through_the_harness(kafka_bootstrap: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks.run", "--quick", "--runs", "1", "--only", "spark",
           "--spark-records", "0", "--systems", "millpond", "--bootstrap", kafka_bootstrap,
           "--out-dir", str(out), "--work-dir", str(tmp_path / "work")]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["problems"] == [], results["problems"]
    assert results["spark_rebuild"] is None  # --spark-records 0 skips it
    run = results["spark_bootstrap"]["runs"][0]
    assert run["records"] == run["keys"] == run["changelog_records"] == 20_000
    assert run["records_per_second"] > 0 and run["spark_startup_seconds"] > 0
    assert "Spark bootstrap of a store from Parquet" in (out / "readme-table.md").read_text()
    assert "Spark bootstrap: records per second" in (out / "results.md").read_text()

"""Smoke test of the Spark bootstrap benchmark through the harness (`benchmarks.run --quick
--only spark`): it bootstraps 20k Parquet rows, checks the changelog holds every record, and
reports records/s in results.json and the README table. It times nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.helpers import run_bench

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_quick_spark_bootstrap_through_the_harness(kafka_bootstrap: str, tmp_path: Path) -> None:
    results, out = run_bench(kafka_bootstrap, tmp_path, "--quick", "--runs", "1", "--only",
                             "spark", "--spark-records", "0", "--systems", "millpond")
    assert results["spark_rebuild"] is None  # --spark-records 0 skips it
    run = results["spark_bootstrap"]["runs"][0]
    assert run["records"] == run["keys"] == run["changelog_records"] == 20_000
    assert run["records_per_second"] > 0 and run["spark_startup_seconds"] > 0
    assert "Spark bootstrap of a store from Parquet" in (out / "readme-table.md").read_text()
    assert "Spark bootstrap: records per second" in (out / "results.md").read_text()

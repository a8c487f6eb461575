"""Smoke test of the snapshot-restore benchmark through the harness (`benchmarks.run --quick
--only snapshot-restore`): a 20k-record store partition written by a real job, a snapshot
uploaded to a real S3Proxy, a 2% tail; `millpond restore --full` and `--from-backup` into
empty dirs must both equal the job's store. It times nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.helpers import run_bench

pytestmark = pytest.mark.kafka


def test_quick_snapshot_restore_through_the_harness(kafka_bootstrap: str,
                                                    tmp_path: Path) -> None:
    results, out = run_bench(kafka_bootstrap, tmp_path, "--quick", "--runs", "1", "--only",
                             "snapshot-restore", "--systems", "millpond")
    res = results["snapshot_restore"]["result"]
    assert res["records"] == 20_000 and res["tail_updates"] == res["tail_new_keys"] == 200
    assert res["stores_equal"] is True
    assert res["expected"]["keys"] == 20_200
    assert res["snapshot"]["offset"] >= 19_999 and res["snapshot"]["sst_files"] >= 1
    full, backup = res["runs"]["full"][0], res["runs"]["backup"][0]
    for run in (full, backup):
        assert run["equal"] is True and run["restored_keys"] == 20_200
        assert run["sha256"] == res["expected"]["sha256"]
        assert run["wall_s"] > 0 and run["maxrss_mb"] > 10
        assert "cpu_steal_percent" in run and len(run["load_average_before"]) == 3
    assert full["snapshot_bytes"] == 0 and full["replayed_records"] >= 20_200
    assert backup["snapshot_bytes"] == res["snapshot"]["bytes"]
    assert 0 < backup["replayed_records"] < full["replayed_records"]
    assert backup["downloaded_bytes"] == backup["snapshot_bytes"] + backup["changelog_bytes"]
    assert res["speedup"]["n"] == 1 and res["speedup"]["median"] > 0
    assert "snapshot_restore" in results["workload_conditions"] or \
        "snapshot-restore" in results["workload_conditions"]
    target = next(t for t in results["targets"] if "full changelog replay" in t["target"])
    assert target["goal"] == 5.0 and target["status"] in ("pass", "miss")
    assert "restore onto empty dir: snapshot + tail" in (out / "results.md").read_text()

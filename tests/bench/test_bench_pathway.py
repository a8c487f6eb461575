"""Pathway as a peer of the count (issue #39), without Pathway or Kafka: the peer script's
replay of Pathway's update rows into final counts and its first-message mark, the harness's
result of a run (with the peer faked), and the Pathway targets and table column from a
results dict. test_bench_smoke.py runs the real thing on a small topic."""

from __future__ import annotations

import importlib.util
import json
import logging
import random
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from benchmarks import report, systems
from benchmarks.common import Child
from benchmarks.harness import summarize_runs

PEER = Path(__file__).resolve().parents[2] / "benchmarks" / "peers" / "pathway_count.py"


def _peer_module() -> ModuleType:
    """benchmarks/peers/pathway_count.py (run by the Pathway virtualenv's interpreter; it
    imports pathway only inside count())."""
    spec = importlib.util.spec_from_file_location("pathway_count", PEER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pathway_count = _peer_module()


def test_final_counts_replay_inserts_and_retractions_in_any_order() -> None:
    rows = [{"user_id": "a", "count": 1, "diff": 1, "time": 2},
            {"user_id": "a", "count": 1, "diff": -1, "time": 4},
            {"user_id": "a", "count": 3, "diff": 1, "time": 4},
            {"user_id": "b", "count": 2, "diff": 1, "time": 2},
            {"user_id": "c", "count": 1, "diff": 1, "time": 2},
            {"user_id": "c", "count": 1, "diff": -1, "time": 6},  # gone at the end
            {"user_id": "d", "count": 1, "diff": 1, "time": 2},
            {"user_id": "d", "count": 2, "diff": 1, "time": 4}]  # never retracted: two counts
    want = ({"a": 3, "b": 2}, {"d": {1: 1, 2: 1}})
    assert pathway_count.final_counts(rows) == want
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    assert pathway_count.final_counts(shuffled) == want


def test_dump_reads_the_jsonlines_output(tmp_path: Path) -> None:
    out = tmp_path / "counts.jsonl"
    out.write_text('{"user_id":"u1","count":10,"diff":1,"time":1795774302216}\n'
                   '{"user_id":"u2","count":9,"diff":1,"time":1795774302216}\n\n')
    got = pathway_count.dump({"output": str(out)})
    assert got["counts"] == {"u1": 10, "u2": 9}
    assert (got["rows"], got["inconsistent"], got["retractions"]) == (2, 0, 0)


def test_the_script_writes_its_report_and_versions_to_the_spec_out(tmp_path: Path) -> None:
    """The command line every peer script shares (peers/peer_main.py), run as the harness
    runs it: ``python pathway_count.py dump SPEC.json`` (dump needs no Pathway)."""
    (tmp_path / "counts.jsonl").write_text('{"user_id":"u1","count":3,"diff":1,"time":2}\n')
    spec = {"output": str(tmp_path / "counts.jsonl"), "out": str(tmp_path / "dump.json")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run([sys.executable, str(PEER), "dump", str(tmp_path / "spec.json")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads((tmp_path / "dump.json").read_text())
    assert got["counts"] == {"u1": 3} and set(got["versions"]) == {"pathway"}


def _record(msg: str, created: float) -> logging.LogRecord:
    record = logging.LogRecord("pathway_engine", logging.INFO, __file__, 1, msg, None, None)
    record.created = created
    return record


def test_first_message_is_the_connector_read_start_from_the_engine_log() -> None:
    marks = pathway_count.ReadStart()
    marks.emit(_record("Preparing Pathway computation", 1.0))
    assert marks.first_message is None
    marks.emit(_record("Realtime data starts from the time Timestamp(1795774302216)", 5.0))
    assert marks.first_message == 5.0  # the fallback, until the first choice is seen
    marks.emit(_record("Seek the data source to the reconstructed frontier OffsetAntichain "
                       "{ antichain: {} }", 4.0))
    marks.emit(_record("Seek the data source to the reconstructed frontier again", 9.0))
    assert marks.first_message == 4.0  # the first record of the first choice
    assert marks.marker == pathway_count.READ_STARTS[0]


def _child(started: float, exited: float) -> Child:
    return Child(["python"], 0, started, exited, 12.5, 300.0, "", "")


@pytest.mark.parametrize("first", [1002.0, None])
def test_a_pathway_run_is_timed_from_its_read_start_and_checked_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: float | None) -> None:
    reference = {"u1": 2, "u2": 1}
    calls: list[str] = []

    def fake_peer(ctx: systems.Ctx, peer: str, mode: str, spec: dict[str, Any],
                  run_dir: Path, tag: str) -> tuple[Child, dict[str, Any]]:
        calls.append(mode)
        assert peer == "pathway" and spec["snapshot_interval_ms"] == 5000
        if mode == "count":
            return _child(1000.0, 1012.5), {"first_message": first, "ended": 1012.0,
                                            "graph_built": 1001.5, "maxrss_mb": 420.0,
                                            "first_message_marker": "Seek ...",
                                            "versions": {"pathway": "0.33.0"}}
        return _child(1013.0, 1013.2), {"counts": {"u1": 2, "u2": 7}, "rows": 2,
                                        "inconsistent": 0, "retractions": 0}

    monkeypatch.setattr(systems, "_peer", fake_peer)
    ctx = systems.Ctx("127.0.0.1:9092", "abc123", tmp_path, 5.0)
    res = systems.pathway_count(ctx, "topic", 3, "0", reference)
    if first is None:  # no mark of the read start: a failed run, not one without a rate
        assert not res["ok"] and "first-message mark" in res["error"] and calls == ["count"]
        return
    assert res["ok"] and not res["correct"]  # u2 counted 7 times, not once: WRONG
    assert res["different"] == 1
    assert res["msgs_per_s"] == pytest.approx(3 / 10.0)
    assert res["msgs_per_s_incl_startup"] == pytest.approx(3 / 12.0)
    assert res["startup_s"] == pytest.approx(2.0)
    assert res["maxrss_mb"] == 420.0 and res["maxrss_mb_polled"] == 300.0
    assert res["cpu_s"] == 12.5 and res["exit_after_end_s"] == pytest.approx(0.5)
    assert calls == ["count", "dump"]


def _run(rate: float, wall: float, cpu: float, startup: float = 1.0) -> dict[str, Any]:
    return {"ok": True, "correct": True, "msgs_per_s": rate, "msgs_per_s_incl_startup": wall,
            "startup_s": startup, "cpu_s": cpu, "messages": 1_000_000, "maxrss_mb": 200.0}


def _meta() -> dict[str, Any]:
    return {"machine": {"nproc": 2, "cpu_model": "x", "ram_gib": 1}, "versions": {},
            "date": "2026-11-27T00:00:00+00:00", "command": "python -m benchmarks.run",
            "sizes": {"messages": 1_000_000, "users": 100_000, "partitions": 4}, "runs": 2,
            "commit_ms": 5000, "systems": ["millpond", "pathway"], "workloads": ["count"],
            "peer_versions": {"pathway": {"pathway": "0.33.0"}}}


def test_pathway_targets_pair_runs_and_fill_the_pathway_column() -> None:
    count = {"millpond effectively-once": summarize_runs(
                 [_run(150_000, 100_000, 5.0), _run(120_000, 90_000, 6.0)]),
             report.PATHWAY_KEY: summarize_runs(
                 [_run(100_000, 50_000, 10.0, 9.0), _run(100_000, 75_000, 8.0, 6.0)])}
    results = {"count": count, "meta": _meta(), "workload_conditions": {}}
    got = {t["target"]: t for t in report.targets(results)}
    wall = got["count (effectively-once) wall-clock msg/s >= 1.3x Pathway's (process start -> "
               "end)"]
    assert wall["value"] == pytest.approx((2.0 + 1.2) / 2) and wall["status"] == "pass"
    cpu = got["count (effectively-once) at <= 0.6x Pathway's CPU s"]
    assert cpu["value"] == pytest.approx((0.5 + 0.75) / 2) and cpu["status"] == "miss"
    proc = got["count (effectively-once) processing msg/s >= 1.5x Pathway's (first message -> "
               "end)"]
    assert proc["value"] == pytest.approx(1.35) and proc["status"] == "miss"
    assert {t["row"] for t in (wall, cpu, proc)} == {"count effectively-once"}

    table = report.readme_table(results)
    assert "| Pathway |" in table and "pathway 0.33.0 (its engine's own librdkafka" in table
    eo = next(line for line in table.splitlines() if "effectively-once (default)" in line)
    cells = [c.strip() for c in eo.strip("|").split("|")]
    assert cells[1].startswith("135,000 msg/s (95,000 msg/s incl. 1.00 s start-up)")
    assert cells[5].startswith("100,000 msg/s (62,500 msg/s incl. 7.50 s start-up)")
    assert ">= 1.3x Pathway, wall-clock: 1.60x pass" in cells[7]
    assert "<= 0.6x Pathway's CPU: 0.62x **miss**" in cells[7]
    markdown = report.markdown({**results, "targets": report.targets(results)})
    assert f"count: {report.PATHWAY_KEY}" in markdown and "Kafka read's start" in markdown


def test_the_dataflow_count_is_paired_with_pathway_in_its_own_rounds() -> None:
    """The issue's "dataflow path": the streams API's count against Pathway's count of the
    same rounds, the same three targets, and Pathway's cell on the dataflow row."""
    count = {report.DF_KEYS["eo"]: summarize_runs(
                 [_run(160_000, 120_000, 5.0), _run(140_000, 80_000, 6.0)]),
             report.PATHWAY_KEY: summarize_runs(
                 [_run(100_000, 60_000, 10.0), _run(100_000, 80_000, 8.0)])}
    results = {"dataflow": {"input": {"messages": 1_000_000, "users": 100_000},
                            "count": count, "limits": {}},
               "meta": {**_meta(), "workloads": ["dataflow"]}, "workload_conditions": {}}
    got = {t["target"]: t for t in report.targets(results)}
    proc = got["dataflow count (effectively-once) processing msg/s >= 1.5x Pathway's (first "
               "message -> end)"]
    assert proc["value"] == pytest.approx(1.5) and proc["status"] == "pass"
    wall = got["dataflow count (effectively-once) wall-clock msg/s >= 1.3x Pathway's (process "
               "start -> end)"]
    assert wall["value"] == pytest.approx((2.0 + 1.0) / 2) and wall["status"] == "pass"
    cpu = got["dataflow count (effectively-once) at <= 0.6x Pathway's CPU s"]
    assert cpu["value"] == pytest.approx((0.5 + 0.75) / 2) and cpu["status"] == "miss"
    assert {t["row"] for t in (proc, wall, cpu)} == {"dataflow effectively-once"}
    assert not any(t["target"].startswith("count (") for t in got.values())

    table = report.readme_table(results)
    row = next(line for line in table.splitlines() if "dataflow count `source" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5].startswith("100,000 msg/s (70,000 msg/s incl. 1.00 s start-up)")
    assert "pathway 0.33.0" in table

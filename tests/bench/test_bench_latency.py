"""The latency workload (benchmarks/workloads/latency.py): its percentiles, loss check and
warm-up cut without a broker, its rows in both reports, the harness's stoppable child; and
(slow, with the broker) one quick run of two rows through `benchmarks.run --only latency`."""

from __future__ import annotations

import json
import random
import signal
import sys
from pathlib import Path

import pytest

from benchmarks import data, report
from benchmarks.common import cpu_pressure, pressure_percent, start_child
from benchmarks.jobs import latency_app
from benchmarks.run import parse_args
from benchmarks.workloads import latency
from millpond.streams import TestDriver
from tests.bench.helpers import run_bench


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 1001))
    random.Random(3).shuffle(values)
    got = latency.percentiles(float(v) for v in values)
    assert (got["p50"], got["p99"], got["p99_9"], got["max"]) == (500, 990, 999, 1000)
    assert got["n"] == 1000 and got["mean"] == pytest.approx(500.5)
    one = latency.percentiles([7.5])
    assert one["p50"] == one["p99_9"] == one["max"] == 7.5
    # p99.9 of 100 values is the largest (rank ceil(99.9) = 100), p99 the 99th.
    hundred = latency.percentiles(range(100))
    assert (hundred["p99"], hundred["p99_9"]) == (98, 99)
    empty = latency.percentiles([])
    assert empty["n"] == 0 and empty["p50"] is None and empty["max"] is None


def test_loss_check_wants_every_seq_and_exactly_once_only_under_exactly_once() -> None:
    assert latency.loss_check(range(5), 5, exactly_once=True)["correct"]
    twice = [0, 1, 1, 2, 3, 4, 4, 4]
    alo = latency.loss_check(twice, 5, exactly_once=False)
    assert alo["correct"] and alo["duplicates"] == 3 and alo["duplicated_seqs"] == 2
    eos = latency.loss_check(twice, 5, exactly_once=True)
    assert not eos["correct"] and eos["duplicate_examples"] == [1, 4]
    lost = latency.loss_check([0, 2, 4], 5, exactly_once=False)
    assert not lost["correct"] and lost["missing"] == 2 and lost["missing_examples"] == [1, 3]
    odd = latency.loss_check([0, 1, 2, 9], 3, exactly_once=False)
    assert not odd["correct"] and odd["unexpected_examples"] == [9]
    nothing = latency.loss_check([], 3, exactly_once=False)
    assert nothing["missing"] == 3 and not nothing["correct"]


def test_latencies_leave_out_probes_warm_up_and_later_sightings() -> None:
    records = [(0, 100.0, 900.0),  # a probe
               (5, 1_000.0, 1_010.0),  # paced, in the warm-up
               (7, 3_001.0, 3_020.0),
               (6, 3_000.0, 3_004.5),
               (6, 3_000.0, 3_500.0)]  # seq 6 again (at-least-once): its first sighting counts
    assert latency.latencies(records, first_seq=6) == [19.0, 4.5]


def test_input_records_follow_the_page_view_walk_and_carry_seq_and_time() -> None:
    for seq in (0, 1, 4_321):
        key, partition, head = latency.input_record(seq, 10_000, 4)
        user = data.user_of(seq, 10_000)
        assert key == f"user-{user:06d}".encode() and partition == user % 4
        value = json.loads(f"{head}1700000000123.456}}")
        assert value == {"user_id": key.decode(), "seq": seq, "ts_ms": 1700000000123.456}


def test_cpu_pressure_is_the_share_of_wall_time_stalled() -> None:
    assert pressure_percent((10.0, 1_000_000), (12.0, 1_500_000)) == 25.0  # 0.5 s of 2
    assert pressure_percent(None, (12.0, 1)) is None
    assert pressure_percent((12.0, 1), (12.0, 5)) is None  # no time passed
    now = cpu_pressure()
    if Path("/proc/pressure/cpu").exists():
        assert now is not None and now[1] >= 0
    else:
        assert now is None
    assert parse_args(["--only", "latency"]).latency_runs == 3
    assert parse_args(["--quick", "--only", "latency"]).latency_runs == 1


def test_rows_and_their_readers() -> None:
    args = parse_args(["--only", "latency", "--latency-rates", "5000,20000",
                       "--latency-rows", "alo,eos-100"])
    assert args.latency_rate_list == [5000, 20000] and args.latency_seconds == 30
    assert args.latency_row_list == ["alo", "eos-100"] and args.latency_users == 10_000
    quick = parse_args(["--quick", "--only", "latency"])
    assert quick.latency_rate_list == [500] and quick.latency_seconds == 3
    with pytest.raises(SystemExit):
        parse_args(["--only", "latency", "--latency-rows", "eos-5"])
    assert latency.Row("millpond", "exactly-once", 100, 5000).isolation == "read_committed"
    for g in ("at-least-once", "effectively-once"):
        assert latency.Row("millpond", g, 1000, 5000).isolation == "read_uncommitted"


ALL_ROWS = "alo,eo,eos,eos-100"
PEERS_AND_OURS = "millpond,millpond-dataflow,quix,bytewax,pathway"


class _Harness:
    """What latency._plan reads of a Harness: the arguments and peer_ready (noted)."""

    def __init__(self, argv: list[str], ready: bool = True) -> None:
        self.args = parse_args(["--only", "latency", *argv])
        self.ready, self.asked = ready, []

    def peer_ready(self, peer: str) -> bool:
        self.asked.append(peer)
        return self.ready


def _rows_of(plan: list[latency.Row]) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = {}
    for row in plan:
        out.setdefault(row.system, []).append((row.guarantee, row.commit_ms))
    return out


def test_plan_gives_each_system_the_rows_of_the_guarantees_it_has() -> None:
    h = _Harness(["--systems", PEERS_AND_OURS, "--latency-rows", ALL_ROWS,
                  "--latency-rates", "5000"])
    rows = _rows_of(latency._plan(h))  # type: ignore[arg-type]
    every = [("at-least-once", 1000), ("effectively-once", 1000), ("exactly-once", 1000),
             ("exactly-once", 100)]
    assert rows == {"floor": [("at-least-once", 1000)], "millpond": every,
                    "millpond-dataflow": every,
                    "quix": [("at-least-once", 1000), ("exactly-once", 1000),
                             ("exactly-once", 100)],  # no effectively-once: left out
                    "bytewax": [("at-least-once", 1000)],  # a plain producer's sink
                    "pathway": [("at-least-once", 1000)]}
    assert h.asked == ["quix", "bytewax", "pathway"]  # each peer's virtualenv once


def test_plan_repeats_per_rate_and_leaves_out_what_is_not_selected_or_cannot_run() -> None:
    h = _Harness(["--systems", "millpond-dataflow,quix", "--latency-rows", "alo",
                  "--latency-rates", "5000,20000"])
    plan = latency._plan(h)  # type: ignore[arg-type]
    assert [(r.system, r.rate) for r in plan] == [
        ("floor", 5000), ("millpond-dataflow", 5000), ("quix", 5000),
        ("floor", 20000), ("millpond-dataflow", 20000), ("quix", 20000)]
    # a peer whose virtualenv cannot be made: its rows are left out (the harness notes why)
    broken = _Harness(["--systems", "quix,pathway", "--latency-rows", "alo,eos",
                       "--latency-rates", "5000"], ready=False)
    assert _rows_of(latency._plan(broken)) == {  # type: ignore[arg-type]
        "floor": [("at-least-once", 1000)]}
    assert broken.asked == ["quix", "pathway"]
    # no row of a guarantee the peer has: it is not even installed
    eo = _Harness(["--systems", "bytewax,pathway,quix", "--latency-rows", "eo"])
    assert latency._plan(eo) == [] and eo.asked == []  # type: ignore[arg-type]
    eos = _Harness(["--systems", "millpond,bytewax,quix", "--latency-rows", "eos-100",
                    "--latency-rates", "5000"])
    assert _rows_of(latency._plan(eos)) == {  # type: ignore[arg-type]
        "millpond": [("exactly-once", 100)], "quix": [("exactly-once", 100)]}
    assert eos.asked == ["quix"]


def test_peer_specs_carry_the_rows_commit_interval_and_guarantee(tmp_path: Path) -> None:
    row = latency.Row("quix", "exactly-once", 100, 5000)
    quix = latency.QuixJob.spec(latency.QuixJob.__new__(latency.QuixJob), row, tmp_path)
    assert quix["guarantee"] == "exactly-once" and quix["commit_interval"] == 0.1
    alo = latency.Row("bytewax", "at-least-once", 1000, 5000)
    bw = latency.BytewaxJob.spec(latency.BytewaxJob.__new__(latency.BytewaxJob), alo, tmp_path)
    assert bw["epoch_interval"] == 1.0
    pw = latency.PathwayJob.spec(latency.PathwayJob.__new__(latency.PathwayJob), alo, tmp_path)
    assert pw["snapshot_interval_ms"] == 1000
    assert pw["autocommit_duration_ms"] == latency.PATHWAY_AUTOCOMMIT_MS == 100


class _Msg:
    def __init__(self, value: dict) -> None:
        self._value = json.dumps(value).encode()

    def error(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return 1, 1_700_000_000_000


class _Consumer:
    """One batch, then nothing (the reader is stopped once it was read)."""

    def __init__(self, batch: list[_Msg]) -> None:
        self.batch, self.closed = batch, False

    def consume(self, _n: int, _timeout: float) -> list[_Msg]:
        batch, self.batch = self.batch, []
        return batch

    def poll(self, _timeout: float) -> None:
        return None

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("retractions", [False, True])
def test_the_reader_skips_retractions_only_of_an_update_stream(retractions: bool) -> None:
    update = [{"user": "u", "count": 1, "ts_ms": 5.0, "seq": 0, "diff": 1, "time": 2},
              {"user": "u", "count": 1, "ts_ms": 5.0, "seq": 0, "diff": -1, "time": 4},
              {"user": "u", "count": 2, "ts_ms": 9.0, "seq": 7, "diff": 1, "time": 4}]
    reader = latency.OutputReader("127.0.0.1:1", "out", 1, "read_uncommitted", retractions)
    reader.consumer.close()
    reader.consumer = _Consumer([_Msg(v) for v in update])  # type: ignore[assignment]
    reader.start()
    reader.first_seen.wait(5)
    reader.stop()
    seqs = [r[0] for r in reader.records]
    if retractions:
        assert seqs == [0, 7] and reader.retractions == 1
    else:
        assert seqs == [0, 0, 7] and reader.retractions is None


def test_the_dataflow_app_sends_an_output_per_input_and_keeps_the_count() -> None:
    driver = TestDriver(latency_app({"bench.input": "kafka.in", "bench.output": "kafka.out"}))
    driver.pipe_all("in", [("u1", {"user_id": "u1", "seq": 0, "ts_ms": 1.5}),
                           ("u2", {"user_id": "u2", "seq": 1, "ts_ms": 2.5}),
                           ("u1", {"user_id": "u1", "seq": 2, "ts_ms": 3.5})])
    assert driver.read("out") == [
        ("u1", {"user": "u1", "count": 1, "ts_ms": 1.5, "seq": 0}),
        ("u2", {"user": "u2", "count": 1, "ts_ms": 2.5, "seq": 1}),
        ("u1", {"user": "u1", "count": 2, "ts_ms": 3.5, "seq": 2})]
    assert driver.state("counts") == {"u1": 2, "u2": 1}


def _run(guarantee: str, commit_ms: int, rate: int, p50: float, missing: int = 0) -> dict:
    return {"system": "millpond", "guarantee": guarantee, "commit_ms": commit_ms,
            "rate": rate, "ok": True, "correct": missing == 0, "missing": missing,
            "duplicates": 0, "examples": {"missing": missing}, "achieved_rate": rate * 0.999,
            "outputs": rate * 32 - missing, "produced": rate * 32,
            "latency_ms": {"p50": p50, "p99": p50 * 4, "p99_9": p50 * 8, "max": p50 * 20,
                           "n": rate * 30},
            "produce": {"max_behind_ms": 1.5}, "cpu_s": 12.0, "maxrss_mb": 150.0,
            "cpu_steal_percent": 0.4, "load_average_before": [1.1, 1.0, 0.9],
            "load_average_after": [1.6, 1.2, 1.0]}


def test_latency_rows_in_results_md_and_the_readme_table() -> None:
    results = json.loads((Path(__file__).parent / "data" / "results-2026-11-22.json")
                         .read_text())
    runs = {"alo": [_run("at-least-once", 1000, 5000, 6.0)],
            "eos": [_run("exactly-once", 100, 5000, 80.0, missing=3)],
            "eos2": [_run("exactly-once", 100, 20000, 90.0)]}
    results["latency"] = {"input": {"rates": [5000, 20000], "seconds": 30, "warmup_s": 2,
                                    "users": 10_000, "partitions": 4, "producer": "paced",
                                    "reader": "consume"},
                          "rows": {k: latency.summarize_latency(rs) for k, rs in runs.items()}}
    alo = results["latency"]["rows"]["alo"]
    assert alo["p50_ms"]["median"] == 6.0 and alo["isolation"] == "read_uncommitted"
    assert results["latency"]["rows"]["eos"]["wrong"]
    results["targets"] = report.targets(results)
    md = report.markdown(results)
    line = next(x for x in md.splitlines() if x.startswith("| millpond | at-least-once"))
    assert "| 1000 | 5,000 | 4,995 | 1.50 | 160,000 |" in line
    assert "| 6.00 | 24.0 | 48.0 | 120 |" in line
    assert "none lost" in line and "1.1 → 1.6" in line and "0.4%" in line
    assert "**WRONG**: 3 missing" in md
    table = report.readme_table(results)
    assert table.count("| workload |") == 1
    row = next(x for x in table.splitlines() if "exactly-once, commit 100 ms" in x)
    assert "5k msg/s: **WRONG**" in row
    assert "20k msg/s: p50 90.0 / p99 360 / p99.9 720 / max 1,800 ms" in row
    assert "end-to-end latency of a keyed count" in table


def test_a_started_child_stops_on_sigterm_with_its_rusage(tmp_path: Path) -> None:
    running = start_child([sys.executable, "-c", "import time; time.sleep(60)"],
                          logdir=tmp_path, name="sleeper")
    assert running.alive()
    child = running.stop(grace=10)
    assert child.returncode == -signal.SIGTERM and not child.timed_out
    assert child.wall_s < 10 and child.cpu_s >= 0 and len(child.load_before) == 3
    assert not running.alive()


@pytest.mark.kafka
@pytest.mark.slow  # ~12 s: two job runs (make test-slow, make bench-smoke)
def test_quick_latency_run_sees_every_input(kafka_bootstrap: str, tmp_path: Path) -> None:
    results, out = run_bench(kafka_bootstrap, tmp_path, "--only", "latency", "--systems",
                             "millpond", "--latency-rates", "300", "--latency-seconds", "2",
                             "--latency-warmup-s", "1", "--latency-users", "200",
                             "--latency-rows", "alo,eos-100", "--latency-runs", "1")
    rows = results["latency"]["rows"]
    assert len(rows) == 3  # the bare client loop's floor beside millpond's two rows
    floor = [e for e in rows.values() if e["system"] == latency.FLOOR]
    assert [e["guarantee"] for e in floor] == ["at-least-once"]
    for entry in rows.values():
        assert entry["good_runs"] == 1, entry
        run = entry["runs"][0]
        assert run["missing"] == 0 and run["produced"] == run["probes"] + 900
        assert run["outputs"] >= run["produced"] and run["latency_ms"]["n"] >= 500
        assert 0 < run["latency_ms"]["p50"] <= run["latency_ms"]["p99"] <= run["latency_ms"]["max"]
        assert run["achieved_rate"] == pytest.approx(300, rel=0.1)
        assert run["returncode"] == 0 and len(run["load_average_before"]) == 3
        assert "cpu_steal_percent" in run
        if Path("/proc/pressure/cpu").exists():  # the kernel's PSI (this machine's has it)
            assert 0 <= run["cpu_pressure_percent"] <= 100
    eos = next(e for e in rows.values() if e["guarantee"] == "exactly-once")
    assert eos["commit_ms"] == 100 and eos["runs"][0]["duplicates"] == 0
    assert eos["runs"][0]["isolation"] == "read_committed"
    assert "| millpond | exactly-once | 100 | 300 |" in (out / "results.md").read_text()
    assert "| floor | at-least-once | 1000 | 300 |" in (out / "results.md").read_text()
    assert "end-to-end latency of a keyed count" in (out / "readme-table.md").read_text()

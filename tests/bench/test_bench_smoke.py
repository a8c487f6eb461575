"""Smoke test of the benchmark harness: `benchmarks.run --quick` counts correctly and reports.

It times nothing: it checks that `python -m benchmarks.run` produces its inputs, measures the
raw consume and consume + JSON-decode ceilings, runs the millpond count at every guarantee on
the uniform topic (effectively-once once more with the Prometheus reporter on, with the undo
journal on and serving 1,000 gets/s from a query driver; exactly-once once more at its
default commit interval) and on the
skewed (Zipf) topic (20k messages over 10k users), and the peak-RSS count over 10k users,
verifies each final state against the reference and writes results.json, results.md and
readme-table.md (in a temp dir, never over benchmarks/results.*). A second run checks the
dataflow workload on 2,000 messages (the two-stage app and Bytewax).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import data, report
from tests.bench.helpers import run_bench

pytestmark = pytest.mark.kafka

GUARANTEES = ("at-least-once", "effectively-once", "exactly-once")


def _good(entry: dict, messages: int, keys: int) -> None:
    assert entry["good_runs"] == 1 and not entry["wrong"] and not entry["failed"], entry
    run = entry["runs"][0]
    assert run["correct"] is True
    assert run["total"] == messages and run["keys"] == keys
    assert run["msgs_per_s"] > 0 and run["cpu_s"] > 0 and run["maxrss_mb"] > 10
    assert "cpu_steal_percent" in run and len(run["load_average_before"]) == 3


@pytest.mark.slow  # 54 s in CI: make test-slow keeps make test under 20 min
def test_quick_run_writes_correct_results(kafka_bootstrap: str, tmp_path: Path) -> None:
    results, out = run_bench(kafka_bootstrap, tmp_path, "--quick", "--runs", "1", "--only",
                             "limits,count,skew,rss,store", "--systems", "millpond")
    sizes = results["meta"]["sizes"]
    assert sizes["messages"] == 20_000
    assert (sizes["skew_messages"], sizes["skew_users"], sizes["skew_exponent"]) == (
        20_000, 10_000, 1.1)

    # Ceilings: raw consume and consume + orjson decode, every record read.
    limits = results["limits"]
    for ceiling in ("consume", "consume_json"):
        assert all(r["records"] == 20_000 for r in limits["runs"][ceiling])
        assert limits[f"{ceiling}_msgs_per_s"]["median"] > 0
    assert limits["json_decoder"].startswith("orjson")

    for guarantee in GUARANTEES:
        _good(results["count"][f"millpond {guarantee}"], 20_000, 2_000)
    # The count once more with the Prometheus reporter on, scraped while it ran; its cost is
    # a target (pass or miss: --quick sizes time nothing) and a row of the README table.
    on = results["count"][report.METRICS_KEY]
    _good(on, 20_000, 2_000)
    assert on["runs"][0]["metrics"]["scrapes"] >= 1
    assert on["runs"][0]["metrics"]["last_scrape_bytes"] > 1000
    cost = next(t for t in results["targets"] if "Prometheus reporter: cost <= 3%" in t["target"])
    assert cost["status"] in ("pass", "miss") and cost["goal"] == 0.03 and cost["row"]
    # ... and once more with the record undo journal on (task.dlq.stream set, nothing
    # dead-lettered: the counts are exact); its CPU cost per message is a target.
    undo = results["count"][report.UNDO_KEY]
    _good(undo, 20_000, 2_000)
    assert undo["runs"][0]["dlq_stream"].startswith("kafka.")
    undo_cost = next(t for t in results["targets"]
                     if t["target"] == "undo journal costs <= 3% (CPU s per message)")
    assert undo_cost["status"] in ("pass", "miss") and undo_cost["goal"] == 0.03
    assert undo_cost["row"] == "count undo"
    # ... and once more serving paced gets of its store from a driver process (issue #33):
    # answered while it ran; the throughput loss is a target.
    queried = results["count"][report.QUERIES_KEY]
    _good(queried, 20_000, 2_000)
    driven = queried["runs"][0]["queries"]
    assert driven["rate"] == 1000 and driven["answered_all_run"] > 0
    assert driven["driver_cpu_s"] > 0
    # ... and once more with the driver on and off in alternating phases (the loss within one
    # run: the target where it is measured).
    phased = results["count"][report.QUERY_PHASES_KEY]
    _good(phased, 20_000, 2_000)
    assert phased["runs"][0]["queries"]["phase_s"] == 0.02
    overhead = next(t for t in results["targets"]
                    if t["target"] == "query overhead <= 5% at 1000 q/s")
    assert overhead["status"] in ("pass", "miss") and overhead["goal"] == 0.05
    assert overhead["row"] == "count queries"
    # ... and exactly-once once more with task.commit.ms unset (100 ms there, issue #39): its
    # throughput against the exactly-once count at --commit-ms.
    default = results["count"][report.EOS_DEFAULT_KEY]
    _good(default, 20_000, 2_000)
    assert default["runs"][0]["commit_ms"] == "default"
    assert results["count"]["millpond exactly-once"]["runs"][0]["commit_ms"] == 5000
    eos_cost = next(t for t in results["targets"] if t["row"] == "count exactly-once default commit")
    assert eos_cost["status"] == "info" and eos_cost["value"] is not None

    # The skewed topic: its keys are the seeded Zipf draw, counted exactly at every guarantee.
    skew = results["skew"]
    expected = data.make_dataset(20_000, 10_000, 4, zipf=1.1, seed=14).describe()
    for field in ("distinct_users", "hottest_user_share", "messages_per_partition"):
        assert skew["input"][field] == expected[field], field
    assert skew["input"]["distinct_users"] < 10_000
    assert skew["input"]["hottest_user_share"] > 0.05  # hot keys
    for ceiling in ("consume", "consume_json"):
        assert all(r["records"] == 20_000 for r in skew["limits"]["runs"][ceiling])
    for guarantee in GUARANTEES:
        _good(skew["count"][f"millpond {guarantee}"], 20_000, expected["distinct_users"])

    rss = results["rss"]
    assert rss["input"]["users"] == 10_000
    _good(rss["count"]["millpond effectively-once"], 20_000, 10_000)

    assert set(results["workload_conditions"]) == {"limits", "count", "skew", "rss", "store"}
    # The store scripts run against today's store API (a stale call failed only in make bench).
    for script in ("store_micro", "store_hot"):
        assert results[script] is not None, script
    assert results["meta"]["machine"]["cpu_steal_percent"] is not None

    names = {t["target"]: t for t in results["targets"]}
    for guarantee in ("at-least-once", "effectively-once"):
        for prefix in ("", "skewed (Zipf 1.1): "):
            for what in ("25% of raw consume", "60% of consume + JSON decode"):
                t = names[f"{prefix}count ({guarantee}) >= {what}"]
                assert t["status"] in ("pass", "miss") and t["value"] > 0
    rss_target = next(t for t in results["targets"] if "peak RSS <=" in t["target"])
    assert rss_target["goal"] == pytest.approx(253.5) and rss_target["value"] > 10
    assert any(t["status"] == "info" and "10,000 users" in t["target"]
               for t in results["targets"])

    markdown = (out / "results.md").read_text()
    assert "count: millpond exactly-once" in markdown
    assert f"count: {report.METRICS_KEY}" in markdown
    assert f"count: {report.UNDO_KEY}" in markdown
    assert f"count: {report.QUERIES_KEY}" in markdown and "get latency p99" in markdown
    assert "skewed count: millpond exactly-once" in markdown
    assert "**WRONG**" not in markdown and "FAILED" not in markdown
    table = (out / "readme-table.md").read_text()
    assert table.startswith(report.README_BEGIN) and table.rstrip().endswith(report.README_END)
    assert table.count("| workload |") == 1  # one table
    assert "Zipf 1.1" in table and "CPU steal" in table and "load average" in table
    assert "Prometheus reporter on (scraped every 1 s)" in table and "cost <= 3%: " in table
    assert "undo journal on" in table and "cost <= 3% (CPU s per message): " in table
    assert "`task.commit.ms` unset (its default there: 100 ms)" in table
    assert "serving gets of its store" in table and "overhead <= 5% at 1000 q/s: " in table
    assert results["meta"]["command"] in table


def test_quick_dataflow_run_counts_exactly(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The dataflow workload on 2,000 messages: the two-stage app (filter -> key_by -> count
    -> to, through its key_by's internal topic, to its own output topic) and Bytewax (its
    virtualenv is made on first use, ~10-40 s once), each verified exactly, and their rows in
    the reports. The dataflow count and the one-stage app run the same path without the hop
    (each millpond run costs seconds here, so they are left out); test_bench_apps.py checks
    every app on the TestDriver and the workload's targets from a results dict."""
    results, out = run_bench(kafka_bootstrap, tmp_path, "--runs", "1", "--only", "dataflow",
                             "--systems", "millpond,bytewax", "--dataflow-runs", "two-stage",
                             "--messages", "2000", "--users", "200")
    df = results["dataflow"]
    assert all(r["records"] == 2_000 for r in df["limits"]["runs"]["consume_json"])
    _good(df["count"]["bytewax (recovery on)"], 2_000, 200)
    kept = df["hop"]["kept_messages"]
    assert 0 < kept < 2_000  # the filter drops the /help views
    two = df["count"]["millpond two-stage (filter, key_by, count, to) effectively-once"]
    assert two["good_runs"] == 1 and not two["wrong"] and not two["failed"], two
    run = two["runs"][0]
    assert run["correct"] is True and run["total"] == kept and run["keys"] == 200
    assert run["outputs"] == kept  # one count sent per kept record
    assert run["msgs_per_s_to_90pct_sent"] > 0
    assert run["first_message_marker"] == "swapped"  # the timing peek left the chain
    assert results["meta"]["peer_versions"]["bytewax"]["bytewax"] == "0.21.1"

    table = (out / "readme-table.md").read_text()
    assert "| Bytewax |" in table and "two-stage" in table and "bytewax 0.21.1" in table
    assert "dataflow workload: bytewax (recovery on)" in (out / "results.md").read_text()


@pytest.mark.slow  # its virtualenv is made on first use: a ~300 MB wheel (make test-slow)
def test_quick_pathway_count_counts_exactly(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The count workload with Pathway alone on 2,000 messages: its static read, groupby
    count and persistence run in its own virtualenv, its first message is its Kafka read's
    start, and its counts (the output's update rows) equal the reference exactly; its row
    in results.md and its column in the README table. test_bench_pathway.py checks the
    replay of its output, the timing mark and the targets without Pathway."""
    results, out = run_bench(kafka_bootstrap, tmp_path, "--runs", "1", "--only", "count",
                             "--systems", "pathway", "--messages", "2000", "--users", "200",
                             timeout=600)
    entry = results["count"][report.PATHWAY_KEY]
    _good(entry, 2_000, 200)
    run = entry["runs"][0]
    assert run["first_message_marker"].startswith("Seek the data source")
    assert 0 < run["startup_s"] < run["process_wall_s"]
    assert run["inconsistent_keys"] == 0 and run["output_rows"] >= 200
    assert results["meta"]["peer_versions"]["pathway"]["pathway"] == "0.33.0"
    assert "count: " + report.PATHWAY_KEY in (out / "results.md").read_text()
    table = (out / "readme-table.md").read_text()
    assert "| Pathway |" in table and "pathway 0.33.0" in table


@pytest.mark.slow  # four millpond runs, ~15 s (make test-slow)
def test_quick_joins_run_joins_every_view_exactly(kafka_bootstrap: str, tmp_path: Path) -> None:
    """The joins workload on a 200-row table and 2,000 page views: each millpond app (the
    stream-table join and the as-of join) loads the table in a bounded run over an empty
    stream topic, then joins the filled topic in a second run of the same job; every view
    comes out once with its user's profile, read back from the output topic."""
    results, out = run_bench(kafka_bootstrap, tmp_path, "--runs", "1", "--only", "joins",
                             "--systems", "millpond", "--messages", "2000",
                             "--join-table-rows", "200")
    joins = results["joins"]
    assert joins["input"]["table_rows"] == 200 and joins["input"]["messages"] == 2_000
    for key in (report.JOIN_KEYS["join"], report.JOIN_KEYS["asof"]):
        entry = joins["runs"][key]
        assert entry["good_runs"] == 1 and not entry["wrong"] and not entry["failed"], entry
        run = entry["runs"][0]
        assert run["correct"] is True and run["keys"] == 2_000
        assert run["output"] == {"duplicates": 0, "malformed": 0, "records": 2_000}
        assert run["load_wall_s"] > 0 and run["msgs_per_s"] > 0
    assert "joins workload: " + report.JOIN_KEYS["join"] in (out / "results.md").read_text()


def test_quick_sessions_run_is_exact_and_has_its_rss_target(kafka_bootstrap: str,
                                                            tmp_path: Path) -> None:
    """The sessions workload at --quick sizes (20k messages over 10k users, shuffled): the
    session-window count and the 1-minute tumbling count each send exactly the reference's
    sessions / windows (none twice, the flush keys' left open), and the peak-RSS target
    (sessions <= 1.5x tumbling; pass or miss: --quick sizes measure nothing) is in the
    results, the targets and the README table."""
    results, out = run_bench(kafka_bootstrap, tmp_path, "--quick", "--runs", "1", "--only",
                             "sessions", "--systems", "millpond")
    ses = results["sessions"]
    assert ses["input"]["users"] == 10_000 and ses["input"]["messages"] == 20_004
    assert 0 < ses["input"]["sessions_of_more_than_one_record"] < 10_000
    at = ", job.container.memory.mb=256"  # both jobs once more at a container's budget
    expected = {report.SES_KEYS["tumbling"]: ses["input"]["windows_expected"],
                report.SES_KEYS["sessions"]: ses["input"]["sessions_expected"]}
    expected.update({key + at: keys for key, keys in expected.items()})
    for key, keys in expected.items():
        entry = ses["runs"][key]
        assert entry["good_runs"] == 1 and not entry["wrong"] and not entry["failed"], entry
        run = entry["runs"][0]
        assert run["correct"] is True and run["keys"] == keys  # each user's, exactly
        assert run["output"]["duplicates"] == 0 and run["output"]["flush"] == 0
        assert run["msgs_per_s"] > 0 and run["cpu_s"] > 0 and run["maxrss_mb"] > 10
    mine, budgeted = ses["targets"]
    assert mine["target"] == ("millpond session windows peak RSS <= 1.5x tumbling (both at "
                              "the default budget)")
    assert budgeted["budget_mb"] == 256 and budgeted["rounds"][0]["ratio"] > 0
    assert mine["status"] in ("pass", "miss") and mine["rounds"][0]["ratio"] > 0
    t = next(t for t in results["targets"] if t["row"] == "sessions")
    assert t["target"] == mine["target"] and t["status"] == mine["status"]
    assert "sessions workload: " + report.SES_KEYS["sessions"] in (out / "results.md").read_text()
    assert "peak RSS <= 1.5x tumbling: " in (out / "readme-table.md").read_text()

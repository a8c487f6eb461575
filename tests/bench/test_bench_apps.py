"""The dataflow and windows workloads' apps (benchmarks/jobs.py) on the streams TestDriver,
without Kafka: each counts what the StreamTask count or the hop's reference counts, the
window app sends the windows workload's reference windows; and both workloads' targets from
a results dict."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from benchmarks import jobs, report
from benchmarks.data import PAGES
from benchmarks.harness import summarize_runs
from millpond.streams import TestDriver

CONFIG = {"bench.input": "kafka.views", "bench.output": "kafka.out"}
VIEWS = [(f"user-{i % 5}", {"user_id": f"user-{i % 5}", "page": PAGES[i % 7], "seq": i})
         for i in range(70)]


def test_count_app_counts_every_view_per_key() -> None:
    driver = TestDriver(jobs.count_app(CONFIG))
    driver.pipe_all("views", VIEWS)
    assert driver.state("counts") == dict(Counter(key for key, _ in VIEWS))


def test_hop_apps_count_the_kept_views_per_user_and_send_each_count() -> None:
    kept = Counter(v["user_id"] for _, v in VIEWS if v["page"] != "/help")
    assert 0 < sum(kept.values()) < len(VIEWS)
    for app in (jobs.one_stage_app, jobs.two_stage_app):
        driver = TestDriver(app(CONFIG))
        driver.pipe_all("views", VIEWS)
        assert driver.state("counts") == dict(kept), app.__name__
        sent = driver.read("out")
        assert len(sent) == sum(kept.values())
        assert {k: n for k, n in sent} == dict(kept)  # the last count sent per user


def _run(rate: float, cpu: float) -> dict[str, Any]:
    return {"ok": True, "correct": True, "msgs_per_s": rate, "cpu_s": cpu,
            "messages": 1_000_000, "msgs_per_s_to_90pct_sent": rate * 2}


def test_dataflow_targets_pair_runs_and_rounds() -> None:
    count = {report.DF_KEYS[k]: {"runs": [_run(*a), _run(*b)]} for k, a, b in (
        ("eo", (200.0, 4.0), (100.0, 4.0)), ("task-eo", (200.0, 5.0), (50.0, 5.0)),
        ("bytewax", (20.0, 30.0), (10.0, 30.0)), ("quix-alo", (25.0, 30.0), (20.0, 30.0)),
        ("one", (100.0, 8.0), (100.0, 8.0)), ("two", (30.0, 16.0), (40.0, 16.0)))}
    limits = {"runs": {"consume_json": [{"msgs_per_s": 400.0}, {"msgs_per_s": 500.0}]}}
    results = {"dataflow": {"count": count, "limits": limits}}
    got = {t["target"]: t for t in report.targets(results)}
    share = got["dataflow count (effectively-once) >= 65% of consume + JSON decode"]
    assert share["value"] == 0.35 and share["status"] == "miss"  # (50% + 20%) / 2, per round
    assert got["dataflow count (effectively-once) >= 5x Bytewax (recovery on)"]["value"] == 10.0
    assert got["dataflow count (effectively-once) vs Bytewax (recovery on), by CPU s per "
               "message"]["value"] == 7.5
    quix = got["dataflow count (effectively-once) >= 10x Quix (at-least-once)"]
    assert quix["value"] == 6.5 and quix["status"] == "miss"
    hop = got["repartition hop (key_by) cost <= 40%, first message -> 90% of the counts sent"]
    assert round(hop["value"], 6) == 0.65 and hop["status"] == "miss"
    table = report.readme_table({**results, "meta": _meta(), "workload_conditions": {}})
    assert "| Bytewax |" in table and "two-stage" in table and "hop cost <= 40%" in table


def _meta() -> dict[str, Any]:
    return {"machine": {"nproc": 2, "cpu_model": "x", "ram_gib": 1}, "versions": {},
            "date": "2026-11-26T00:00:00+00:00", "command": "python -m benchmarks.run",
            "sizes": {"messages": 1_000_000, "users": 100, "partitions": 4}, "runs": 2,
            "commit_ms": 5000, "systems": ["millpond", "bytewax"], "workloads": ["dataflow"]}


def test_window_app_sends_the_reference_windows_once_each() -> None:
    """The windows workload's app on its own generated data (with the flush records): every
    window of the data is sent once, as windows.reference computes them; only the flush
    keys' windows stay open."""
    from benchmarks.workloads import windows

    ds = windows.window_dataset(3_000, 100, 1)  # one partition: the driver's one task
    want = windows.reference(ds)
    assert len(want) > 100 and all(end - int(k.split("|")[1]) == jobs.WINDOW_MS
                                   for k, (end, _) in want.items())
    assert sum(n for _, n in want.values()) == 3_000
    driver = TestDriver(jobs.window_app(CONFIG))
    driver.pipe_all("views", [(k.decode(), orjson.loads(v)) for k, v, _ in ds.records])
    sent = driver.read("out")
    got = {f"{k}|{v['start']}": [v["end"], v["value"]] for k, v in sent}
    assert len(got) == len(sent)  # none twice
    assert got == want


def test_session_app_sends_the_reference_sessions_once_each() -> None:
    """The sessions workload's app on its own generated data (shuffled users, the flush
    records): every session of the data is sent once, as sessions.session_reference computes
    them (some users' records in one session, some in two); only the flush keys' sessions
    stay open. The tumbling app on the same data sends windows.reference's windows."""
    from benchmarks.workloads import sessions, windows

    ds = sessions.session_dataset(3_000, 1_000, 1, seed=14)  # one partition: one task
    want = sessions.session_reference(ds)
    counts = Counter(n for _, n in want.values())
    assert sum(n * c for n, c in counts.items()) == 3_000
    assert counts[1] > 100 and counts[2] + counts[3] > 100  # sessions of one and of several
    records = [(k.decode(), orjson.loads(v)) for k, v, _ in ds.records]
    for app, expected in ((jobs.session_app, want), (jobs.window_app, windows.reference(ds))):
        driver = TestDriver(app(CONFIG))
        driver.pipe_all("views", records)
        sent = driver.read("out")
        got = {f"{k}|{v['start']}": [v["end"], v["value"]] for k, v in sent}
        assert len(got) == len(sent), app.__name__  # none twice
        assert got == expected, app.__name__


def test_session_reference_splits_at_the_gap() -> None:
    """The operator's rule: a record joins a session when it is less than the gap after its
    last record; exactly the gap apart starts a new one."""
    from benchmarks import data
    from benchmarks.workloads import sessions

    gap = sessions.GAP_MS
    times = [0, gap - 1, 2 * gap - 2, 3 * gap + 5]  # the first three joined, then a new one
    recs = [(b"u", orjson.dumps({"ts": t}), 0) for t in times]
    ds = data.Dataset(len(recs), 1, 1, recs)
    assert sessions.session_reference(ds) == {"u|0": [2 * gap - 2, 3],
                                              f"u|{3 * gap + 5}": [3 * gap + 5, 1]}
    boundary = [(b"v", orjson.dumps({"ts": t}), 0) for t in (0, gap)]
    driver = TestDriver(jobs.session_app(CONFIG))
    driver.pipe_all("views", [(k.decode(), orjson.loads(v)) for k, v, _ in boundary]
                    + [("w", {"ts": 10 * gap})])
    assert driver.read("out") == [("v", {"start": 0, "end": 0, "value": 1}),
                                  ("v", {"start": gap, "end": gap, "value": 1})]
    assert sessions.session_reference(data.Dataset(2, 1, 1, boundary)) == {
        "v|0": [0, 1], f"v|{gap}": [gap, 1]}


def test_sessions_target_pairs_runs_by_peak_rss() -> None:
    from benchmarks.workloads import sessions

    def run(mb: float) -> dict[str, Any]:
        return {**_run(100.0, 10.0), "maxrss_mb": mb}

    at = ", job.container.memory.mb=256"
    runs = {sessions.TUMBLING: [run(200.0), run(200.0)],
            sessions.SESSIONS: [run(280.0), run(320.0)],
            sessions.TUMBLING + at: [run(150.0), run(150.0)],
            sessions.SESSIONS + at: [run(300.0), run(310.0)]}
    t, b = sessions.targets(runs, (None, 256))
    assert t["median"] == 1.5 and t["status"] == "pass" and b["status"] == "miss"
    assert t["target"] == ("millpond session windows peak RSS <= 1.5x tumbling (both at the "
                           "default budget)")
    assert b["median"] == 305 / 150 and b["budget_mb"] == 256
    runs[sessions.SESSIONS][0]["maxrss_mb"] = 400.0
    assert sessions.targets(runs)[0]["status"] == "miss"
    results = {"sessions": {"runs": {k: summarize_runs(rs) for k, rs in runs.items()},
                            "input": {"messages": 1_000_000, "users": 100},
                            "targets": sessions.targets(runs, (None, 256))}}
    got = {t["target"]: t for t in report.targets(results)}
    assert got["millpond session windows peak RSS <= 1.5x tumbling (both at the default "
               "budget)"]["status"] == "miss"
    assert got["millpond session windows peak RSS <= 1.5x tumbling (both at "
               "job.container.memory.mb=256)"]["value"] == 305 / 150
    table = report.readme_table({**results, "meta": _meta(), "workload_conditions": {}})
    assert "session-window count per user" in table and "<= 1.5x tumbling" in table
    md = report.markdown({**results, "meta": _meta(), "workload_conditions": {}})
    assert "session count, 30-minute gap (effectively-once), job.container.memory.mb=256" in md


def test_windows_targets_pair_runs() -> None:
    runs = {report.WIN_KEYS[k]: {"runs": [_run(*a)]} for k, a in (
        ("windows", (100.0, 10.0)), ("count", (150.0, 5.0)), ("quix", (25.0, 40.0)),
        ("bytewax", (20.0, 30.0)))}
    results = {"windows": {"runs": runs, "input": {"messages": 1_000_000, "users": 100}}}
    got = {t["target"]: t for t in report.targets(results)}
    quix = got["windows (effectively-once) >= 5x Quix Streams windows (at-least-once)"]
    assert quix["value"] == 4.0 and quix["status"] == "miss"
    bw = got["windows (effectively-once) >= 4x Bytewax windows (recovery on)"]
    assert bw["value"] == 5.0 and bw["status"] == "pass"
    assert got["windows (effectively-once) vs Bytewax windows (recovery on), by CPU s per "
               "message"]["value"] == 3.0
    share = got["windows (effectively-once) >= 50% of the dataflow count (effectively-once, "
                "same topic)"]
    assert round(share["value"], 6) == round(100 / 150, 6) and share["status"] == "pass"
    table = report.readme_table({**results, "meta": _meta(), "workload_conditions": {}})
    assert "tumbling count per user" in table and ">= 5x Quix Streams windows" in table


def test_join_apps_send_every_view_with_its_users_profile() -> None:
    """The joins workload's apps on its own generated data, the table piped first (as the
    workload loads it first): every page view comes out once, enriched as joins.reference
    says; the as-of app too, its versions by the value's ts."""
    from benchmarks import data
    from benchmarks.workloads import joins

    table = joins.table_dataset(50, 1)
    stream = data.make_dataset(400, 50, 1)
    want = joins.reference(stream)
    assert len(want) == 400 and len({row[1] for row in want.values()}) > 10
    config = {**CONFIG, "bench.table": "kafka.profiles"}
    for app in (jobs.join_app, jobs.asof_app):
        driver = TestDriver(app(config))
        driver.pipe_all("profiles", [(k.decode(), orjson.loads(v)) for k, v, _ in table.records])
        driver.pipe_all("views", [(k.decode(), orjson.loads(v)) for k, v, _ in stream.records])
        sent = driver.read("out")
        got = {str(v["seq"]): [v["user_id"], v["zip"], v["tier"]] for _, v in sent}
        assert len(got) == len(sent) == 400, app.__name__
        assert got == want, app.__name__


def test_joins_targets_pair_runs() -> None:
    runs = {report.JOIN_KEYS[k]: {"runs": [_run(*a)]} for k, a in (
        ("join", (120.0, 10.0)), ("asof", (60.0, 20.0)), ("quix", (20.0, 40.0)))}
    results = {"joins": {"runs": runs, "input": {"messages": 1_000_000, "table_rows": 100}}}
    got = {t["target"]: t for t in report.targets(results)}
    join = got["stream-table join (effectively-once) >= 5x Quix Streams join_asof"]
    assert join["value"] == 6.0 and join["status"] == "pass"
    asof = got["as-of join (effectively-once) vs Quix Streams join_asof"]
    assert asof["value"] == 3.0 and asof["goal"] is None
    assert got["stream-table join (effectively-once) vs Quix Streams join_asof, by CPU s per "
               "message"]["value"] == 4.0
    table = report.readme_table({**results, "meta": _meta(), "workload_conditions": {}})
    assert "stream-table join" in table and ">= 5x Quix join_asof" in table

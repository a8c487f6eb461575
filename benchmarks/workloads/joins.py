"""The ``joins`` workload: a stream-table join, each page view enriched with its user's
profile, in millpond's dataflow (``app.table`` + ``Stream.join``, ``benchmarks.jobs:join_app``;
and as an as-of join, ``versioned_table`` + ``join_asof``, ``asof_app``) and in Quix Streams
(``join_asof``, its join of a stream with a table's topic; its ``join_lookup`` reads an
external database instead of a topic).

**Input.** A table topic of ``--join-table-rows`` profiles (default 1M: one per user,
``{"user_id", "zip", "tier", "ts"}``, keyed and partitioned by user as the page views are,
every ``ts`` a minute before the first page view's) and a stream of ``--messages`` page views
(default 2M) over those users, the bench's page-view generator (``ts``: one ms a message). The
output of every system is one ``enrich(view, profile)`` record per page view
(benchmarks/jobs.py), checked exactly against the reference computed from the generated data:
every ``seq`` once, with its user's zip and tier.

**Two phases, one timed.** Each run loads the table first, then joins: a system reading both
topics at once could read a page view before its user's row and find nothing (Quix reads its
topics together; millpond's ``table`` is read as a source of the same task), so each run gets
an empty stream topic of its own, reads the table into its state (millpond: a bounded run;
Quix: its app stopped once every row is stored), the stream topic is then filled, and the
same job (same state dir, group and stores) runs again over it. The second run is the figure:
first page view -> last result, as in the other workloads; the load is reported beside it.
millpond runs effectively-once, Quix at-least-once (as in the windows workload).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from benchmarks import data, systems
from benchmarks.common import MILLPOND, Child, load_average, run_child
from benchmarks.harness import Harness, say, say_run, summarize_runs
from benchmarks.workloads.count import _failed
from benchmarks.workloads.windows import _check, _output, paired

TABLE_TS = data.TS0 - 60_000  # every profile's ts: a minute before the first page view
TIERS = ("free", "pro", "team")

JOIN = "millpond dataflow stream-table join (effectively-once)"
ASOF = "millpond dataflow as-of join (effectively-once)"
QUIX = "quix join_asof (at-least-once)"
ORDER = [JOIN, ASOF, QUIX]
APPS = {JOIN: "join_app", ASOF: "asof_app"}

# The target (the windows and joins issue): millpond's stream-table join >= 5x Quix's join.
GOAL = 5.0


def profile(u: int) -> dict[str, Any]:
    """User ``u``'s row of the table."""
    return {"user_id": f"user-{u:06d}", "zip": f"{(u * 7877) % 100_000:05d}",
            "tier": TIERS[u % 3], "ts": TABLE_TS}


def table_dataset(rows: int, partitions: int) -> data.Dataset:
    """One profile per user, keyed and partitioned as the page views are (user % partitions)."""
    records = [(f"user-{u:06d}".encode(), orjson.dumps(profile(u)), u % partitions)
               for u in range(rows)]
    return data.Dataset(rows, rows, partitions, records)


def reference(stream: data.Dataset) -> dict[str, list[str]]:
    """What every page view must come out as: ``seq -> [user_id, zip, tier]``."""
    want: dict[str, list[str]] = {}
    for key, value, _ in stream.records:
        v = orjson.loads(value)
        p = profile(int(key[5:]))
        want[str(v["seq"])] = [v["user_id"], p["zip"], p["tier"]]
    return want


def results_of(bootstrap: str, topic: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """A run's output topic as the reference's dict, and what else it held."""
    got: dict[str, list[str]] = {}
    other = {"duplicates": 0, "malformed": 0, "records": 0}
    for _key, value in data.read_records(bootstrap, topic):
        other["records"] += 1
        try:
            v = orjson.loads(value or b"null")
            seq, row = str(v["seq"]), [v["user_id"], v["zip"], v["tier"]]
        except (ValueError, KeyError, TypeError):
            other["malformed"] += 1
            continue
        if seq in got:
            other["duplicates"] += 1
        else:
            got[seq] = row
    return got, other


def _fill(h: Harness, topic: str, stream: data.Dataset) -> None:
    rate = data.produce(h.args.bootstrap, topic, stream)
    say(f"joins: {topic} filled, {stream.messages:,} msgs, {rate['msgs_per_s']:,.0f} msg/s")


def _load_fields(child: Child) -> dict[str, Any]:
    return {"load_wall_s": child.wall_s, "load_cpu_s": child.cpu_s,
            "load_maxrss_mb": child.maxrss_mb}


def millpond_join(h: Harness, key: str, table: str, stream: data.Dataset, tag: str,
                  want: dict[str, list[str]]) -> dict[str, Any]:
    """A bounded run of the app over the table alone (its stream topic still empty), then,
    with the topic filled, the timed bounded run of the same job, checked from its output."""
    ctx = h.ctx
    guarantee = "effectively-once"
    name = f"mpj-{ctx.salt}-{tag}"
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    timing, config = run_dir / "timing.json", run_dir / "job.properties"
    topic, output = _output(h, tag, "joinin"), _output(h, tag, "joinout")
    props = systems.millpond_props(ctx, name, topic, guarantee, run_dir / "state", timing,
                                   APPS[key], output)
    props["bench.table"] = f"kafka.{table}"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    res: dict[str, Any] = {"system": "millpond", "guarantee": guarantee, "job": name,
                           "config": str(config), "messages": stream.messages,
                           "app": APPS[key]}
    load = run_child([MILLPOND, "run", "--config", str(config), "--bounded"],
                     timeout=ctx.timeout, logdir=run_dir, name="load")
    if load.returncode != 0:
        return {**res, "ok": False, "error": f"table load: exit {load.returncode}: "
                f"{load.tail()}"}
    res.update(_load_fields(load))
    timing.unlink(missing_ok=True)
    _fill(h, topic, stream)
    child = run_child([MILLPOND, "run", "--config", str(config), "--bounded"],
                      timeout=ctx.timeout, logdir=run_dir, name="run")
    res.update(systems._child_fields(child))
    if child.returncode != 0:
        return {**res, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    marks = json.loads(timing.read_text()) if timing.exists() else {}
    res.update(systems._rates(stream.messages, child.started, marks.get("first_message"),
                              child.exited))
    return _check(res, ctx, output, want, results_of)


def quix_join(h: Harness, table: str, rows: int, stream: data.Dataset, tag: str,
              want: dict[str, list[str]]) -> dict[str, Any]:
    """Quix's ``join_asof`` app: phase ``load`` until every table row is stored, then the
    stream topic filled and phase ``join`` (same group and state dir), timed."""
    ctx = h.ctx
    topic = _output(h, f"q{tag}", "joinin")
    spec = systems.quix_spec(ctx, topic, stream.messages, "at-least-once", f"j{tag}")
    spec.update({"table": table, "output": _output(h, f"q{tag}", "joinout"),
                 "table_rows": rows, "outputs": len(want), "phase": "load"})
    run_dir = Path(spec["run_dir"])
    res: dict[str, Any] = {"system": "quix", "guarantee": "at-least-once",
                           "group": spec["group"], "spec": spec, "messages": stream.messages}
    load, out = systems._peer(ctx, "quix", "join", spec, run_dir, "load")
    if load.returncode != 0 or not out:
        return {**res, "ok": False, "error": f"table load: exit {load.returncode}: "
                f"{load.tail()}"}
    if out.get("table_rows_read") != rows:
        return {**res, "ok": False, "error": f"table load read {out.get('table_rows_read')} "
                f"of {rows} rows"}
    res.update(_load_fields(load))
    _fill(h, topic, stream)
    child, out = systems._peer(ctx, "quix", "join", {**spec, "phase": "join"}, run_dir, "run")
    res.update(systems._child_fields(child))
    if child.returncode != 0 or not out:
        return {**res, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    res.update(systems._rates(stream.messages, child.started, out.get("first_message"),
                              out["ended"]))
    res["in_process_cpu_s"] = out.get("cpu_s")
    res["versions"] = out.get("versions")
    return _check(res, ctx, spec["output"], want, results_of)


def targets(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per round: millpond's stream-table join against Quix's join (the goal), and its as-of
    join against Quix's (information), by wall-clock rate and by CPU s per message."""
    out: list[dict[str, Any]] = []
    for mine_key, goal in ((JOIN, GOAL), (ASOF, None)):
        rounds, median = paired(runs.get(mine_key) or [], runs.get(QUIX) or [])
        what = (f"{mine_key} >= {goal:g}x {QUIX}" if goal is not None
                else f"{mine_key} vs {QUIX}")
        status = ("missing" if median is None else "info" if goal is None
                  else "pass" if median >= goal else "miss")
        out.append({"target": what, "goal": goal, "rounds": rounds, "median": median,
                    "status": status})
    return out


def _plan(h: Harness) -> list[tuple[str, str]]:
    a = h.args
    plan: list[tuple[str, str]] = []
    if "millpond" in a.system_list:
        plan += [(JOIN, "millpond"), (ASOF, "millpond")]
    if "quix" in a.system_list and h.peer_ready("quix"):
        plan.append((QUIX, "quix"))
    return plan


def joins(h: Harness) -> None:
    a = h.args
    rows = a.join_table_rows
    say(f"joins: generating a {rows:,}-row table and {a.messages:,} page views over its users")
    table_ds = table_dataset(rows, a.partitions)
    table = h.topic("jointable", table_ds)
    stream = data.make_dataset(a.messages, rows, a.partitions)
    want = reference(stream)
    h.results["joins"] = {
        "input": {"table": table, "table_rows": rows, "messages": stream.messages,
                  "users": rows, "partitions": a.partitions, "table_ts": TABLE_TS,
                  "event_time": "the value's ts field (ms)", "join": "inner",
                  "phases": "table load (untimed figure), then the timed join"},
    }
    plan = _plan(h)
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(a.runs):
        for key, system in (plan if r % 2 == 0 else plan[::-1]):
            if system != "millpond" and r >= a.peer_runs:
                continue
            say(f"joins run {r + 1}/{a.runs}: {key} on {stream.messages:,} msgs "
                f"(load {load_average()})")
            tag = f"j{r}k{ORDER.index(key)}"
            try:
                res = (quix_join(h, table, rows, stream, tag, want) if system == "quix"
                       else millpond_join(h, key, table, stream, tag, want))
            except Exception as exc:
                res = _failed(system, "joins", exc)
            say_run(key, res)
            runs.setdefault(key, []).append(res)
    h.results["joins"].update({
        "runs": {key: summarize_runs(rs) for key, rs in runs.items()},
        "targets": targets(runs),
    })
    for t in h.results["joins"]["targets"]:
        med = f"{t['median']:.2f}" if t["median"] is not None else "-"
        say(f"joins target {t['target']}: {med} ({t['status']})")
    h.report_bad_runs("joins", runs)

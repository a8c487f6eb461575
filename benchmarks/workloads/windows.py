"""The ``windows`` workload: a 1-minute tumbling count per user, final results only, by event
time, in millpond's dataflow (``benchmarks.jobs:window_app``), Quix Streams
(``tumbling_window(60_000).count().final()``) and Bytewax 0.21.1 (``count_window`` over a
``TumblingWindower``), all on one topic of their own; beside them millpond's plain dataflow
count (``count_app``) on the same topic, and its consume + JSON decode ceiling.

**Event time** is the value's ``ts`` field (ms): every system can take it from the value the
same way (millpond ``timestamp=``, Quix the topic's ``timestamp_extractor``, Bytewax an
``EventClock``'s ``ts_getter``), it is deterministic (the Kafka timestamp is the producer's
wall clock, ~10 s for 2M records, so all of it would fall in one or two windows) and the
reference can be computed from the generated data alone. The topic's ``ts`` runs from TS0
to TS0 + SPAN_MS in message order (SPAN_MS = 5 minutes: 2M messages over 100k users give
each user a record every 15 s of event time, ~4 per window; the bench's main topic has one
ms a message, 33 minutes, and so one record per user and window).

**Which windows close.** Grace 0 everywhere (each partition's ``ts`` only grows, so no record
is late). millpond closes a window when its operator's stream time (per task: per input
partition) passes the window's end; Quix does with ``final(closing_strategy="partition")``
(its default, "key", closes a key's windows only at that key's next record, so each user's
last window would stay open). At the end of the input each partition gets one **flush
record** of its own key (``flush-<p>``) an hour of event time past the data: it closes every
window of the data in millpond and Quix, and its own window stays open. Bytewax's watermark is
per key and also moves with the wall clock, so a flush record closes nothing there; its
windows close WAIT_S of wall clock after their end passes a key's largest ``ts`` (the wait
keeps a key's next record, 100k messages later, from being late on a loaded machine; it costs
Bytewax: with 0, 10k users run ~3x faster, see --bytewax-wait-s) and at
the end of the input (EOF), where every open window closes, the flush keys' too. So every
system's output is compared without the flush keys, against the exact reference: one result
``{"start", "end", "value"}`` per user and window of the data, none twice.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from benchmarks import data, jobs, systems
from benchmarks.common import MILLPOND, load_average, run_child
from benchmarks.harness import Harness, say, say_run, summarize_runs
from benchmarks.workloads.count import _failed
from benchmarks.workloads.limits import ceiling

SPAN_MS = 5 * 60_000  # the data's event time span
FLUSH_AHEAD_MS = 3_600_000  # the flush records' ts: this far past the data's last
FLUSH = "flush-"  # the flush records' keys: flush-<partition>
WAIT_S = 120.0  # Bytewax's wait_for_system_duration (--bytewax-wait-s)

WINDOWS = "millpond dataflow windows (effectively-once)"
COUNT = "millpond dataflow count (effectively-once)"
QUIX = "quix windows (at-least-once)"
BYTEWAX = "bytewax windows (recovery on)"
ORDER = [WINDOWS, COUNT, QUIX, BYTEWAX]

# The targets (the windows issue): millpond's windows >= goal x the others' windows, and >=
# share of the same round's plain dataflow count.
GOALS = {QUIX: 5.0, BYTEWAX: 4.0}
COUNT_SHARE = 0.5


def window_dataset(messages: int, users: int, partitions: int) -> data.Dataset:
    """The bench's page views with ``ts`` over SPAN_MS, and one flush record a partition."""
    ds = data.make_dataset(messages, users, partitions, span_ms=SPAN_MS)
    ts = data.TS0 + SPAN_MS + FLUSH_AHEAD_MS
    for p in range(partitions):
        key = f"{FLUSH}{p}"
        ds.records.append((key.encode(), data.page_view(messages + p, key, ts).encode(), p))
    ds.messages = len(ds.records)
    return ds


def reference(ds: data.Dataset) -> dict[str, list[int]]:
    """Every user's window of the data: ``"<user>|<start>" -> [end, count]`` (flush keys out)."""
    counts: Counter[tuple[str, int]] = Counter()
    size = jobs.WINDOW_MS
    for key, value, _ in ds.records:
        user = key.decode()
        if user.startswith(FLUSH):
            continue
        t = orjson.loads(value)["ts"]
        counts[(user, t - t % size)] += 1
    return {f"{u}|{s}": [s + size, n] for (u, s), n in counts.items()}


def results_of(bootstrap: str, topic: str) -> tuple[dict[str, list[int]], dict[str, int]]:
    """A run's output topic as the reference's dict, and what else it held (flush keys'
    windows, results sent twice, records not of the expected shape)."""
    got: dict[str, list[int]] = {}
    other = {"flush": 0, "duplicates": 0, "malformed": 0, "records": 0}
    for key, value in data.read_records(bootstrap, topic):
        other["records"] += 1
        try:
            user, v = (key or b"").decode(), orjson.loads(value or b"null")
            # millpond's string key serde writes the key as is; a JSON-quoted one is unquoted.
            if user.startswith('"'):
                user = json.loads(user)
            name, row = f"{user}|{v['start']}", [v["end"], v["value"]]
        except (ValueError, KeyError, TypeError):
            other["malformed"] += 1
            continue
        if user.startswith(FLUSH):
            other["flush"] += 1
        elif name in got:
            other["duplicates"] += 1
        else:
            got[name] = row
    return got, other


def _check(res: dict[str, Any], ctx: systems.Ctx, output: str, want: dict[str, Any],
           read: Callable[[str, str], tuple[dict[str, Any], dict[str, int]]] | None = None,
           ) -> dict[str, Any]:
    """``res`` with the run's output topic compared to ``want`` (read by ``read``, default
    :func:`results_of`): wrong if it differs or held a record twice or malformed."""
    got, other = (read or results_of)(ctx.bootstrap, output)
    res.update(systems.compare(got, want))
    res["output"] = other
    if other["duplicates"] or other["malformed"]:
        res["correct"] = False
    res["ok"] = True
    return res


def _output(h: Harness, tag: str, kind: str = "winout") -> str:
    """A new empty topic of this run (a run's output, or another workload's input)."""
    topic = f"millpond-bench-{kind}-{h.salt}-{tag}"
    data.create_topic(h.args.bootstrap, topic, h.args.partitions)
    h.topics.append(topic)
    return topic


def millpond_windows(h: Harness, topic: str, messages: int, tag: str,
                     want: dict[str, list[int]], app: str = "window_app",
                     extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``millpond run --bounded`` of ``app`` (``window_app``; the sessions workload's
    ``session_app`` too: the same ``{"start", "end", "value"}`` results), effectively-once,
    checked from its output topic; ``extra``: more job properties."""
    ctx = h.ctx
    guarantee = "effectively-once"
    name = f"mpw-{ctx.salt}-{tag}"
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    timing, config = run_dir / "timing.json", run_dir / "job.properties"
    output = _output(h, tag)
    props = systems.millpond_props(ctx, name, topic, guarantee, run_dir / "state", timing,
                                   app, output)
    props.update(extra or {})
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    child = run_child([MILLPOND, "run", "--config", str(config), "--bounded"],
                      timeout=ctx.timeout, logdir=run_dir, name="run")
    res: dict[str, Any] = {"system": "millpond", "guarantee": guarantee, "job": name,
                           "config": str(config), "messages": messages, "app": app}
    res.update(systems._child_fields(child))
    if child.returncode != 0:
        return {**res, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    marks = json.loads(timing.read_text()) if timing.exists() else {}
    res.update(systems._rates(messages, child.started, marks.get("first_message"),
                              child.exited))
    return _check(res, ctx, output, want)


def quix_windows(h: Harness, topic: str, messages: int, tag: str,
                 want: dict[str, list[int]]) -> dict[str, Any]:
    ctx = h.ctx
    spec = systems.quix_spec(ctx, topic, messages, "at-least-once", f"w{tag}")
    spec.update({"output": _output(h, f"q{tag}"), "window_ms": jobs.WINDOW_MS,
                 "outputs": len(want)})
    run_dir = Path(spec["run_dir"])
    child, out = systems._peer(ctx, "quix", "windows", spec, run_dir, "windows")
    res: dict[str, Any] = {"system": "quix", "guarantee": "at-least-once",
                           "group": spec["group"], "spec": spec, "messages": messages,
                           "closing_strategy": "partition"}
    res.update(systems._child_fields(child))
    if child.returncode != 0 or not out:
        return {**res, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    res.update(systems._rates(messages, child.started, out.get("first_message"), out["ended"]))
    res["in_process_cpu_s"] = out.get("cpu_s")
    res["versions"] = out.get("versions")
    return _check(res, ctx, spec["output"], want)


def bytewax_windows(h: Harness, topic: str, messages: int, tag: str,
                    want: dict[str, list[int]]) -> dict[str, Any]:
    ctx = h.ctx
    name = f"bww-{ctx.salt}-{tag}"
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"bootstrap": ctx.bootstrap, "topic": topic, "output": _output(h, f"b{tag}"),
            "recovery_dir": str(run_dir / "state" / "recovery"), "partitions": 1,
            "epoch_interval": ctx.commit_s, "messages": messages,
            "window_ms": jobs.WINDOW_MS, "wait_s": _wait_s(h)}
    child, out = systems._peer(ctx, "bytewax", "windows", spec, run_dir, "windows")
    res: dict[str, Any] = {"system": "bytewax", "guarantee": "recovery on", "group": name,
                           "spec": spec, "messages": messages}
    res.update(systems._child_fields(child))
    if child.returncode != 0 or not out:
        return {**res, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    res.update(systems._rates(messages, child.started, out.get("first_message"), out["ended"]))
    res["in_process_cpu_s"] = out.get("cpu_s")
    # As in the dataflow workload: the larger of the polled peak and its own getrusage.
    res["maxrss_mb_polled"] = res["maxrss_mb"]
    res["maxrss_mb"] = max(res["maxrss_mb"], out.get("maxrss_mb") or 0.0)
    res["versions"] = out.get("versions")
    return _check(res, ctx, spec["output"], want)


def _wait_s(h: Harness) -> float:
    wait = getattr(h.args, "bytewax_wait_s", None)
    return WAIT_S if wait is None else float(wait)


def _plan(h: Harness) -> list[tuple[str, str]]:
    a = h.args
    plan: list[tuple[str, str]] = []
    if "millpond" in a.system_list:
        plan += [(WINDOWS, "millpond"), (COUNT, "millpond")]
    if "quix" in a.system_list and h.peer_ready("quix"):
        plan.append((QUIX, "quix"))
    if "bytewax" in a.system_list and h.peer_ready("bytewax"):
        plan.append((BYTEWAX, "bytewax"))
    return plan


def paired(mine: list[dict[str, Any]], theirs: list[dict[str, Any]],
           ) -> tuple[list[dict[str, float]], float | None]:
    """Run i of ``mine`` against run i of ``theirs`` where both are good (ran, exact, timed):
    each pair's rate ratio and CPU-per-message ratio, and the median rate ratio."""
    def good(r: dict[str, Any] | None) -> bool:
        return bool(r and r.get("ok") and r.get("correct") and r.get("msgs_per_s"))

    rounds = []
    for m, t in zip(mine, theirs, strict=False):
        if good(m) and good(t):
            rounds.append({"ratio": m["msgs_per_s"] / t["msgs_per_s"],
                           "cpu_ratio": (t["cpu_s"] / t["messages"])
                           / (m["cpu_s"] / m["messages"])})
    ratios = sorted(r["ratio"] for r in rounds)
    return rounds, (ratios[len(ratios) // 2] if ratios else None)


def targets(runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per round: millpond's windows against each peer's windows (goal x) and against the
    round's plain dataflow count (share), by wall-clock rate and by CPU s per message."""
    mine = runs.get(WINDOWS) or []
    out: list[dict[str, Any]] = []

    for other, goal in [*GOALS.items(), (COUNT, COUNT_SHARE)]:
        rounds, median = paired(mine, runs.get(other) or [])
        what = (f"millpond windows >= {goal:g}x {other}" if other != COUNT
                else f"millpond windows >= {goal:.0%} of {COUNT}")
        out.append({"target": what, "goal": goal, "rounds": rounds, "median": median,
                    "status": ("missing" if median is None
                               else "pass" if median >= goal else "miss")})
    return out


def windows(h: Harness) -> None:
    a, ctx = h.args, h.ctx
    say(f"windows: generating {a.messages:,} messages over {a.users:,} users, ts over "
        f"{SPAN_MS // 1000} s, + {a.partitions} flush records")
    ds = window_dataset(a.messages, a.users, a.partitions)
    want = reference(ds)
    counts = ds.reference()  # the plain count's reference (flush keys included)
    topic = h.topic("windows", ds)
    # The report's input line (value sizes) when no other workload made the main topic.
    h.results.setdefault("input", {"topic": topic, **ds.describe(counts)})
    messages = ds.messages
    plan = _plan(h)
    h.results["windows"] = {
        "input": {"topic": topic, "messages": messages, "users": a.users,
                  "partitions": a.partitions, "span_ms": SPAN_MS,
                  "flush_records": a.partitions, "flush_ts_ahead_ms": FLUSH_AHEAD_MS,
                  "window_ms": jobs.WINDOW_MS, "grace_ms": 0, "bytewax_wait_s": _wait_s(h),
                  "windows_expected": len(want),
                  "quix_closing_strategy": "partition",
                  "event_time": "the value's ts field (ms)"},
    }
    consume_json: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(a.runs):
        consume_json.append(ceiling(h, topic, decode_json=True))
        say(f"windows ceiling run {r + 1}: consume+orjson "
            f"{consume_json[-1]['msgs_per_s']:,.0f} msg/s")
        for key, system in (plan if r % 2 == 0 else plan[::-1]):
            if system != "millpond" and r >= a.peer_runs:
                continue
            say(f"windows run {r + 1}/{a.runs}: {key} on {messages:,} msgs "
                f"(load {load_average()})")
            tag = f"w{r}k{ORDER.index(key)}"
            try:
                if key == WINDOWS:
                    res = millpond_windows(h, topic, messages, tag, want)
                elif key == COUNT:
                    res = systems.millpond_count(ctx, topic, messages, "effectively-once", tag,
                                                 counts, app="count_app")
                elif system == "quix":
                    res = quix_windows(h, topic, messages, tag, want)
                else:
                    res = bytewax_windows(h, topic, messages, tag, want)
            except Exception as exc:
                res = _failed(system, "windows", exc)
            say_run(key, res)
            runs.setdefault(key, []).append(res)
    h.results["windows"].update({
        "limits": {"runs": {"consume_json": consume_json}},
        "runs": {key: summarize_runs(rs) for key, rs in runs.items()},
        "targets": targets(runs),
    })
    for t in h.results["windows"]["targets"]:
        med = f"{t['median']:.2f}" if t["median"] is not None else "-"
        say(f"windows target {t['target']}: {med} ({t['status']})")
    h.report_bad_runs("windows", runs)

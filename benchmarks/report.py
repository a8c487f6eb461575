"""Targets (pass/miss) and the Markdown table of a benchmark run (``results.md``)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import summarize


def _med(fig: dict[str, Any] | None) -> float | None:
    return fig.get("median") if fig else None


def _count(results: dict[str, Any], key: str) -> dict[str, Any]:
    return results.get("count", {}).get(key) or {}


def _good(entry: dict[str, Any], field: str) -> list[float | None]:
    """Per run (in order) the field of good runs, None for a failed or WRONG run."""
    return [r.get(field) if r.get("ok") and r.get("correct") else None
            for r in entry.get("runs", [])]


def paired_ratio(ours: dict[str, Any], theirs: dict[str, Any], field: str,
                 invert: bool = False) -> dict[str, Any] | None:
    """millpond/peer per run pair (run i with run i); ``invert`` for times (peer/ours)."""
    a, b = _good(ours, field), _good(theirs, field)
    ratios = []
    for x, y in zip(a, b, strict=False):
        if x and y:
            ratios.append(y / x if invert else x / y)
    if not ratios:
        return None
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "n": len(ratios), "runs": ratios}


METRICS_KEY = "millpond effectively-once, metrics on"
BACKUPS_KEY = "millpond effectively-once, backups on"
# The count with the record undo journal on (task.dlq.stream set, issue #35), beside the same
# count without it.
UNDO_KEY = "millpond effectively-once, undo journal on"
# The count serving paced gets of its store (job.query.address set, issue #33), beside the
# same count without queries.
QUERIES_KEY = "millpond effectively-once, queries on"
# The same count with the driver on and off in alternating phases (--query-phase-s): its rate
# with and without queries within one run.
QUERY_PHASES_KEY = "millpond effectively-once, queries on and off"
# The exactly-once count with task.commit.ms unset (its default there: 100 ms, as Kafka
# Streams', for sub-second visibility; issue #39), beside the same count at --commit-ms.
EOS_DEFAULT_KEY = "millpond exactly-once, default task.commit.ms (100 ms)"
QUERY_COST = 0.05  # serving 1,000 gets/s may cost at most 5% of the count's throughput
UNDO_COST = 0.03  # the undo journal may cost at most 3% of the count's CPU s per message
BACKUPS_COST = 0.05  # state backups (to S3Proxy) may cost at most 5% of the count's throughput
METRICS_COST = 0.03  # the Prometheus reporter may cost at most 3% of the count's throughput
RSS_BASELINE_MB = 169.0  # peak RSS of the count job with defaults at 100k users (issue #14)
QUIX_FACTOR = 8.0
# Pathway (issue #39): millpond's default count (effectively-once), StreamTask and dataflow,
# against Pathway's count of the same topic in the same round (kafka.read in static mode,
# persistence on): wall-clock msg/s (process start -> end) >= 1.3x Pathway's at <= 0.6x its
# CPU seconds, and processing msg/s (first message -> end) >= 1.5x Pathway's.
PATHWAY_KEY = "pathway (static, persistence on)"
PATHWAY_WALL_FACTOR = 1.3
PATHWAY_CPU_SHARE = 0.6
PATHWAY_FACTOR = 1.5
# The dataflow workload's targets (issue #29): the streams API's count against the ceiling of
# the same run, Bytewax, Quix Streams (and Pathway, above); and the cost of a key_by's
# repartition hop.
DF_DECODE_SHARE = 0.65
DF_BYTEWAX_FACTOR = 5.0
DF_QUIX_FACTOR = 10.0
DF_HOP_COST = 0.40
DF_KEYS = {"eo": "millpond dataflow effectively-once", "eos": "millpond dataflow exactly-once",
           "task-eo": "millpond StreamTask effectively-once",
           "task-eos": "millpond StreamTask exactly-once",
           "one": "millpond one-stage (filter, count, to) effectively-once",
           "two": "millpond two-stage (filter, key_by, count, to) effectively-once",
           "bytewax": "bytewax (recovery on)", "quix-alo": "quix at-least-once",
           "quix-eos": "quix exactly-once", "pathway": PATHWAY_KEY}
RAW_CONSUME_SHARE = 0.25
DECODE_CEILING_SHARE = 0.60
# The windows workload's targets (the windows issue): millpond's 1-minute tumbling count (final
# results) >= 5x Quix Streams' and >= 4x Bytewax's, and >= 50% of the same round's plain
# dataflow count of the same topic.
WIN_KEYS = {"windows": "millpond dataflow windows (effectively-once)",
            "count": "millpond dataflow count (effectively-once)",
            "quix": "quix windows (at-least-once)", "bytewax": "bytewax windows (recovery on)"}
WIN_GOALS = (("quix", 5.0, "Quix Streams windows (at-least-once)"),
             ("bytewax", 4.0, "Bytewax windows (recovery on)"))
WIN_COUNT_SHARE = 0.50
# The joins workload's target (the windows and joins issue): millpond's stream-table join >= 5x
# Quix Streams' join_asof on the same table and stream.
JOIN_KEYS = {"join": "millpond dataflow stream-table join (effectively-once)",
             "asof": "millpond dataflow as-of join (effectively-once)",
             "quix": "quix join_asof (at-least-once)"}
JOIN_GOAL = 5.0
# The sessions workload's target (issue #30): the session-window count's peak RSS over 1M
# users <= 1.5x the tumbling count's on the same topic (benchmarks/workloads/sessions.py).
SES_KEYS = {"tumbling": "millpond dataflow tumbling 1-minute count (effectively-once)",
            "sessions": "millpond dataflow session count, 30-minute gap (effectively-once)"}
SES_RSS_FACTOR = 1.5


def _ceiling_targets(add: Any, prefix: str, row: str, guarantee: str, entry: dict[str, Any],
                     limits: dict[str, Any]) -> None:
    """count >= 25% of raw consume and >= 60% of consume + JSON decode, for one guarantee."""
    rate = _med(entry.get("msgs_per_s")) if entry else None
    for ceiling, share, what in (("consume_msgs_per_s", RAW_CONSUME_SHARE, "raw consume"),
                                 ("consume_json_msgs_per_s", DECODE_CEILING_SHARE,
                                  "consume + JSON decode")):
        c = _med(limits.get(ceiling))
        if rate is not None and c:
            add(f"{prefix}count ({guarantee}) >= {share:.0%} of {what}", rate / c, share,
                "fraction", f"{rate:,.0f} / {c:,.0f} msg/s", row=row,
                short=f">= {share:.0%} of {what}")


def _quix_targets(add: Any, prefix: str, count: dict[str, Any], row_of: dict[str, str]) -> None:
    """millpond at-least-once and effectively-once >= 8x Quix Streams (paired runs)."""
    q_alo, q_eos = count.get("quix at-least-once") or {}, count.get("quix exactly-once") or {}
    pairs = (("at-least-once", q_alo, "at-least-once", QUIX_FACTOR),
             # Quix has no effectively-once: its at-least-once, its faster mode, is the bar.
             ("effectively-once", q_alo, "at-least-once", QUIX_FACTOR),
             ("exactly-once", q_eos, "exactly-once", None))
    for ours_g, theirs, their_g, goal in pairs:
        ours = count.get(f"millpond {ours_g}") or {}
        if not (ours and theirs):
            continue
        r = paired_ratio(ours, theirs, "msgs_per_s")
        name = (f"{prefix}count ({ours_g}) >= {goal:g}x Quix Streams ({their_g})" if goal
                else f"{prefix}count ({ours_g}) / Quix Streams ({their_g})")
        add(name, _med(r), goal, "x", "millpond msg/s / Quix msg/s, per run pair", spread=r,
            row=row_of[ours_g],
            short=f">= {goal:g}x Quix ({their_g})" if goal else f"vs Quix ({their_g})")


def _pathway_targets(add: Any, ours: dict[str, Any] | None, theirs: dict[str, Any] | None,
                     row: str, what: str = "count (effectively-once)") -> None:
    """millpond's ``what`` against Pathway's count of the same topic, per run pair:
    wall-clock msg/s (incl. start-up) >= 1.3x at <= 0.6x Pathway's CPU seconds (the same
    messages), and processing msg/s (first message -> end) >= 1.5x."""
    if not (ours and theirs):
        return
    wall = paired_ratio(ours, theirs, "msgs_per_s_incl_startup")
    add(f"{what} wall-clock msg/s >= {PATHWAY_WALL_FACTOR:g}x Pathway's "
        "(process start -> end)", _med(wall), PATHWAY_WALL_FACTOR, "x",
        "millpond msg/s incl. start-up / Pathway's, per run pair", spread=wall, row=row,
        short=f">= {PATHWAY_WALL_FACTOR:g}x Pathway, wall-clock")
    cpu = paired_ratio(ours, theirs, "cpu_s")
    add(f"{what} at <= {PATHWAY_CPU_SHARE:g}x Pathway's CPU s", _med(cpu),
        PATHWAY_CPU_SHARE, "x", "millpond CPU s / Pathway CPU s for the same messages (the "
        "child's wait4, start-up included), per run pair", higher_is_better=False,
        spread=cpu, row=row, short=f"<= {PATHWAY_CPU_SHARE:g}x Pathway's CPU")
    proc = paired_ratio(ours, theirs, "msgs_per_s")
    add(f"{what} processing msg/s >= {PATHWAY_FACTOR:g}x Pathway's "
        "(first message -> end)", _med(proc), PATHWAY_FACTOR, "x",
        "millpond msg/s / Pathway msg/s, per run pair; Pathway's first message is its Kafka "
        "read's start", spread=proc, row=row,
        short=f">= {PATHWAY_FACTOR:g}x Pathway, processing")


def _dataflow_targets(add: Any, df: dict[str, Any]) -> None:
    """The dataflow workload: the streams API's count (effectively-once and exactly-once) as a
    share of the consume + JSON-decode ceiling of the same run, beside the StreamTask count
    (info), >= 5x Bytewax and >= 10x Quix Streams (paired runs); the repartition hop's cost."""
    count = df.get("count") or {}
    if not count:
        return
    limits = df.get("limits") or {}
    decode = _med(limits.get("consume_json_msgs_per_s"))
    for g, short_g in (("effectively-once", "eo"), ("exactly-once", "eos")):
        ours = count.get(DF_KEYS[short_g]) or {}
        if not ours:
            continue
        row = f"dataflow {g}"
        # Per round: the count against the ceiling measured at the start of its own round.
        ceilings = [c.get("msgs_per_s") for c in (limits.get("runs") or {}).get("consume_json",
                                                                                [])]
        shares = [x / c for x, c in zip(_good(ours, "msgs_per_s"), ceilings, strict=False)
                  if x and c]
        if shares:
            add(f"dataflow count ({g}) >= {DF_DECODE_SHARE:.0%} of consume + JSON decode",
                statistics.median(shares), DF_DECODE_SHARE, "fraction",
                "msg/s / the same round's consume + orjson msg/s, per round; medians "
                f"{_n(_med(ours.get('msgs_per_s')))} / {_n(decode)} msg/s",
                spread={"min": min(shares), "max": max(shares)}, row=row,
                short=f">= {DF_DECODE_SHARE:.0%} of consume + JSON decode")
        if g == "effectively-once":
            _state_ceilings(add, limits, count.get(DF_KEYS["quix-alo"]) or {}, row)
        pairs = ((DF_KEYS[f"task-{short_g}"], None, f"vs StreamTask count ({g})"),
                 (DF_KEYS["bytewax"], DF_BYTEWAX_FACTOR, "Bytewax (recovery on)"),
                 (DF_KEYS["quix-alo" if g == "effectively-once" else "quix-eos"],
                  DF_QUIX_FACTOR,
                  "Quix (at-least-once)" if g == "effectively-once" else "Quix (exactly-once)"))
        for key, goal, what in pairs:
            theirs = count.get(key) or {}
            r = paired_ratio(ours, theirs, "msgs_per_s") if theirs else None
            if r is None:
                continue
            name = (f"dataflow count ({g}) >= {goal:g}x {what}" if goal
                    else f"dataflow count ({g}) / StreamTask count ({g})")
            add(name, _med(r), goal, "x", "msg/s / msg/s, per run pair", spread=r, row=row,
                short=f">= {goal:g}x {what}" if goal else what)
            # The same pairs by CPU seconds for the same messages: the steadier view where
            # other guests' load moves the wall clock of one run and not the other.
            cpu = paired_ratio(theirs, ours, "cpu_s")
            if cpu and goal:
                add(f"dataflow count ({g}) vs {what}, by CPU s per message", _med(cpu), None,
                    "x", "their CPU s / ours, per run pair", spread=cpu, row=row,
                    short=f"{what} by CPU")
        if g == "effectively-once":  # Pathway's targets' "dataflow path" (issue #39)
            _pathway_targets(add, ours, count.get(DF_KEYS["pathway"]), row,
                             f"dataflow count ({g})")
    one, two = count.get(DF_KEYS["one"]) or {}, count.get(DF_KEYS["two"]) or {}
    for field, goal, what in (("msgs_per_s_to_90pct_sent", DF_HOP_COST,
                               "first message -> 90% of the counts sent"),
                              ("msgs_per_s", None, "first message -> process exit")):
        r = paired_ratio(two, one, field) if one and two else None
        if not r:
            continue
        name = (f"repartition hop (key_by) cost <= {goal:.0%}, {what}" if goal
                else f"repartition hop (key_by) cost, {what} (incl. the bounded run's end)")
        add(name, 1 - r["median"], goal, "fraction",
            "1 - two-stage msg/s / one-stage msg/s, per run pair (effectively-once)",
            higher_is_better=False, spread={"min": 1 - r["max"], "max": 1 - r["min"]},
            row="dataflow hop",
            short=f"hop cost <= {goal:.0%} (to 90% of the counts sent)" if goal
            else "hop cost to process exit")
    bare = [b.get("hop_cost") for b in ((df.get("limits") or {}).get("runs") or {}).get(
        "bare_hop", []) if b.get("hop_cost") is not None]
    if bare:
        add("repartition hop cost of bare loops (benchmarks/bare_hop.py: the same two apps "
            "over confluent-kafka and orjson alone)", statistics.median(bare), None,
            "fraction", "1 - bare two-stage msg/s / bare one-stage msg/s, per round; no "
            "transactions, commits or runtime: the hop's own cost", higher_is_better=False,
            spread={"min": min(bare), "max": max(bare)}, row="dataflow hop",
            short="bare loops' hop cost")


def _state_ceilings(add: Any, limits: dict[str, Any], quix: dict[str, Any], row: str) -> None:
    """The bare loops of the dataflow rounds (benchmarks/bare_state.py: consume, decode and a
    count through the store stack, or in a dict, nothing else): their share of the decode
    ceiling, the most any count keeping its state in those stores gets of it, and the store
    loop's rate against Quix Streams' (info: what the 10x target would need of the stack)."""
    runs = limits.get("runs") or {}
    decode = [c.get("msgs_per_s") for c in runs.get("consume_json", [])]
    for name, what in (("state_stack", "store stack"), ("state_dict", "dict")):
        rates = [c.get("msgs_per_s") for c in runs.get(name, [])]
        shares = [x / c for x, c in zip(rates, decode, strict=False) if x and c]
        if not shares:
            continue
        add(f"bare loop: consume + decode + a count in the {what}, share of consume + JSON "
            "decode", statistics.median(shares), None, "fraction",
            "per round; no run loop, chain, changelog or commit: the most a count keeping its "
            f"state in the {what} can get", spread={"min": min(shares), "max": max(shares)},
            row=row, short=f"bare {what} loop / decode ceiling")
    stack = [c.get("msgs_per_s") for c in runs.get("state_stack", [])]
    ratios = [x / y for x, y in zip(stack, _good(quix, "msgs_per_s"), strict=False) if x and y]
    if ratios:
        add("bare loop: consume + decode + a count in the store stack / Quix Streams "
            "(at-least-once)", statistics.median(ratios), None, "x",
            "per round: the bare store loop's msg/s / Quix's", row=row,
            spread={"min": min(ratios), "max": max(ratios)}, short="bare store loop vs Quix")


def _windows_targets(add: Any, win: dict[str, Any]) -> None:
    """The windows workload: millpond's windowed count against Quix Streams' and Bytewax's
    (>= 5x, >= 4x) and against the plain dataflow count of the same round and topic (>= 50%),
    per run pair; beside each the same pair by CPU s per message (info)."""
    runs = win.get("runs") or {}
    ours = runs.get(WIN_KEYS["windows"]) or {}
    if not ours:
        return
    for key, goal, what in WIN_GOALS:
        theirs = runs.get(WIN_KEYS[key]) or {}
        r = paired_ratio(ours, theirs, "msgs_per_s") if theirs else None
        if r is None:
            continue
        add(f"windows (effectively-once) >= {goal:g}x {what}", _med(r), goal, "x",
            "msg/s / msg/s, per run pair", spread=r, row="windows",
            short=f">= {goal:g}x {what}")
        cpu = paired_ratio(theirs, ours, "cpu_s")
        if cpu:
            add(f"windows (effectively-once) vs {what}, by CPU s per message", _med(cpu), None,
                "x", "their CPU s / ours, per run pair", spread=cpu, row="windows",
                short=f"{what} by CPU")
    count = runs.get(WIN_KEYS["count"]) or {}
    r = paired_ratio(ours, count, "msgs_per_s") if count else None
    if r is not None:
        add(f"windows (effectively-once) >= {WIN_COUNT_SHARE:.0%} of the dataflow count "
            "(effectively-once, same topic)", _med(r), WIN_COUNT_SHARE, "fraction",
            "windows msg/s / count msg/s, per round", spread=r, row="windows",
            short=f">= {WIN_COUNT_SHARE:.0%} of the dataflow count")


def _joins_targets(add: Any, joins: dict[str, Any]) -> None:
    """The joins workload: millpond's stream-table join against Quix Streams' join_asof
    (>= 5x), and its as-of join against the same (information), per run pair and by CPU."""
    runs = joins.get("runs") or {}
    theirs = runs.get(JOIN_KEYS["quix"]) or {}
    if not theirs:
        return
    for key, goal, what in (("join", JOIN_GOAL, "stream-table join"),
                            ("asof", None, "as-of join")):
        ours = runs.get(JOIN_KEYS[key]) or {}
        r = paired_ratio(ours, theirs, "msgs_per_s") if ours else None
        if r is None:
            continue
        name = (f"{what} (effectively-once) >= {goal:g}x Quix Streams join_asof" if goal
                else f"{what} (effectively-once) vs Quix Streams join_asof")
        add(name, _med(r), goal, "x", "msg/s / msg/s, per run pair", spread=r, row="joins",
            short=f">= {goal:g}x Quix join_asof" if goal else f"{what} vs Quix join_asof")
        cpu = paired_ratio(theirs, ours, "cpu_s")
        if cpu:
            add(f"{what} (effectively-once) vs Quix Streams join_asof, by CPU s per message",
                _med(cpu), None, "x", "their CPU s / ours, per run pair", spread=cpu,
                row="joins", short=f"{what} vs Quix by CPU")


def _ses_budgets(ses: dict[str, Any]) -> list[int | None]:
    """The budgets the sessions workload ran both jobs at (None: the default budget)."""
    out: list[int | None] = [None]
    for t in ses.get("targets") or []:
        if t.get("budget_mb") and t["budget_mb"] not in out:
            out.append(t["budget_mb"])
    return out


def _ses_key(key: str, mb: int | None) -> str:
    """The sessions workload's run row of ``key`` at budget ``mb`` (its ``_at``)."""
    return key if mb is None else f"{key}, job.container.memory.mb={mb}"


def _sessions_targets(add: Any, ses: dict[str, Any]) -> None:
    """The sessions workload: the session count's peak RSS over the tumbling count's, per
    round (<= 1.5x), at the default budget and at each budget both jobs ran at."""
    runs = ses.get("runs") or {}
    for mb in _ses_budgets(ses):
        ours = runs.get(_ses_key(SES_KEYS["sessions"], mb)) or {}
        tumbling = runs.get(_ses_key(SES_KEYS["tumbling"], mb)) or {}
        r = paired_ratio(ours, tumbling, "maxrss_mb") if ours and tumbling else None
        if r is None:
            continue
        where = ("both at the default budget" if mb is None
                 else f"both at job.container.memory.mb={mb}")
        add(f"millpond session windows peak RSS <= {SES_RSS_FACTOR:g}x tumbling ({where})",
            _med(r), SES_RSS_FACTOR, "x", "session run's peak RSS / tumbling run's, per round",
            higher_is_better=False, spread=r, row="sessions",
            short=f"peak RSS <= {SES_RSS_FACTOR:g}x tumbling"
            + ("" if mb is None else f" at {mb} MB"))


def _phase_losses(phased: dict[str, Any] | None) -> list[list[float]]:
    """Each good phased run's losses: each on phase's (1 - its msg/s / that of the off
    phases beside it), or for a run recorded without them, its one loss over all phases."""
    out = []
    for run in (phased or {}).get("runs") or []:
        phases = (run.get("queries") or {}).get("phases") or {}
        if not (run.get("ok") and run.get("correct")):
            continue
        if phases.get("pair_losses"):
            out.append(list(phases["pair_losses"]))
        elif phases.get("loss") is not None:
            out.append([phases["loss"]])
    return out


def _query_targets(add: Any, eo: dict[str, Any], on: dict[str, Any],
                   phased: dict[str, Any] | None = None) -> None:
    """The count serving paced gets (issue #33): the loss of msg/s (the target: within the
    runs that alternate the load on and off where there are any, else against the run
    without), of CPU s, the gets answered per second and their latency."""
    runs = on.get("runs") or [{}]
    rate = ((runs[0].get("queries") or {}).get("rate")) or 0
    target = f"query overhead <= {QUERY_COST:.0%} at {rate:g} q/s"
    short = f"overhead <= {QUERY_COST:.0%} at {rate:g} q/s"
    losses = _phase_losses(phased)
    r = paired_ratio(on, eo, "msgs_per_s")
    if losses:
        phase_s = (((phased or {}).get("runs") or [{}])[0].get("queries") or {}).get("phase_s")
        pooled = [loss for run in losses for loss in run]
        per_run = [statistics.median(run) for run in losses]
        add(target, statistics.median(pooled), QUERY_COST, "cost",
            f"1 - msg/s in a {phase_s:g} s phase serving {rate:g} gets/s / msg/s in the "
            "phases without beside it, within one run (shared-machine drift hits both; "
            f"phases with a commit left out), median of {len(pooled)} phases of "
            f"{len(losses)} runs; the spread is the runs' medians", higher_is_better=False,
            spread={"min": min(per_run), "max": max(per_run)}, row="count queries",
            short=short)
    if r:
        # the target without phased runs, else shown beside theirs
        name, goal, label = ((target, QUERY_COST, short) if not losses else
                             (f"query overhead at {rate:g} q/s against a separate run", None,
                              "overhead, separate runs"))
        add(name, 1 - r["median"], goal, "cost",
            f"1 - msg/s serving {rate:g} gets/s / msg/s without, per run pair",
            higher_is_better=False, spread={"min": 1 - r["max"], "max": 1 - r["min"]},
            row="count queries", short=label)
    cpu = paired_ratio(on, eo, "cpu_s")
    if cpu:
        add("count (effectively-once) serving queries: CPU cost", cpu["median"] - 1, None,
            "cost", "CPU s of the job serving queries / without - 1, per run pair (the "
            "driver's own CPU is not in it)", higher_is_better=False,
            spread={"min": cpu["min"] - 1, "max": cpu["max"] - 1}, row="count queries",
            short="CPU cost")
    for field, what, unit in (("queries_per_s", "gets answered per second", "q/s"),
                              ("query_p50_ms", "get latency p50", "ms"),
                              ("query_p99_ms", "get latency p99", "ms")):
        fig = on.get(field)
        if fig and fig.get("median") is not None:
            add(f"count (effectively-once) serving queries: {what}", fig["median"], None, unit,
                "200 answers while the job processed (first message to exit), driver in its "
                "own process", spread=fig, row="count queries", short=what)


def _throughput_cost(add: Callable[..., None], ours: dict[str, Any], base: dict[str, Any],
                     name: str, with_: str, without: str, row: str) -> None:
    """An informational target: 1 - msg/s of ``ours`` (the count ``with_`` an option) / msg/s
    of ``base`` (``without`` it), per run pair."""
    r = paired_ratio(ours, base, "msgs_per_s")
    if r:
        add(f"{name}: throughput cost", 1 - r["median"], None, "cost",
            f"1 - msg/s with {with_} / msg/s {without}, per run pair",
            higher_is_better=False, spread={"min": 1 - r["max"], "max": 1 - r["min"]},
            row=row, short="msg/s cost")


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the measured figure (median) and pass / miss / n/a (info: no goal).

    ``row`` names the row of the README table (readme_table) the target belongs to.
    """
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: float | None, unit: str, detail: str = "",
            higher_is_better: bool = True, spread: dict[str, Any] | None = None,
            row: str = "", short: str = "") -> None:
        if goal is None:
            status = "info"
        elif value is None:
            status = "n/a"
        elif higher_is_better:
            status = "pass" if value >= goal else "miss"
        else:
            status = "pass" if value <= goal else "miss"
        out.append({"target": name, "value": value, "goal": goal, "unit": unit,
                    "status": status, "detail": detail,
                    "higher_is_better": higher_is_better, "row": row,
                    "short": short or name,
                    "min": spread.get("min") if spread else None,
                    "max": spread.get("max") if spread else None})

    count = results.get("count") or {}
    alo = _count(results, "millpond at-least-once")
    eo = _count(results, "millpond effectively-once")
    eos = _count(results, "millpond exactly-once")
    f_alo = _count(results, "faust at-least-once (small topic)")
    m_f = _count(results, "millpond at-least-once (small topic)")
    limits = results.get("limits") or {}
    rows = {g: f"count {g}" for g in ("at-least-once", "effectively-once", "exactly-once")}

    # The count with defaults over 100k uniform users: ceilings, Quix, RSS, EOS cost.
    for label, entry in (("at-least-once", alo), ("effectively-once", eo)):
        _ceiling_targets(add, "", rows[label], label, entry, limits)
    _quix_targets(add, "", count, rows)
    _pathway_targets(add, count.get("millpond effectively-once"), count.get(PATHWAY_KEY),
                     rows["effectively-once"])
    if eo and eo.get("maxrss_mb"):
        add(f"count (effectively-once, the default) peak RSS <= 1.5x {RSS_BASELINE_MB:.0f} MB "
            f"= {1.5 * RSS_BASELINE_MB:.1f} MB",
            _med(eo["maxrss_mb"]), 1.5 * RSS_BASELINE_MB, "MB",
            f"{(results.get('input') or {}).get('users', 0):,} users; VmHWM of the job process",
            higher_is_better=False, spread=eo["maxrss_mb"], row=rows["effectively-once"],
            short=f"peak RSS <= {1.5 * RSS_BASELINE_MB:.1f} MB")
    metrics_on = _count(results, METRICS_KEY)
    if eo and metrics_on:
        r = paired_ratio(metrics_on, eo, "msgs_per_s")
        if r:
            add(f"count (effectively-once) with the Prometheus reporter: cost <= "
                f"{METRICS_COST:.0%}", 1 - r["median"], METRICS_COST, "cost",
                "1 - msg/s with the reporter (scraped every 1 s) / msg/s without, per run pair",
                higher_is_better=False, spread={"min": 1 - r["max"], "max": 1 - r["min"]},
                row="count metrics", short=f"cost <= {METRICS_COST:.0%}")
        cpu = paired_ratio(metrics_on, eo, "cpu_s")
        if cpu:
            # The job's own CPU seconds (rusage) for the same messages: steal and other
            # guests' load slow the wall clock but do not bill this process, so this is the
            # steadier view of the same cost on a shared machine.
            add("count (effectively-once) with the Prometheus reporter: CPU cost",
                cpu["median"] - 1, None, "cost",
                "CPU s of the job with the reporter / without - 1, per run pair",
                higher_is_better=False, spread={"min": cpu["min"] - 1, "max": cpu["max"] - 1},
                row="count metrics", short="CPU cost")
    backups_on = _count(results, BACKUPS_KEY)
    if eo and backups_on:
        r = paired_ratio(backups_on, eo, "msgs_per_s")
        if r:
            every = (backups_on.get("runs") or [{}])[0].get("backup_interval_ms")
            add(f"count (effectively-once) with state backups: cost <= {BACKUPS_COST:.0%}",
                1 - r["median"], BACKUPS_COST, "cost",
                f"1 - msg/s with backups to S3Proxy (interval {every} ms) / msg/s without, "
                "per run pair", higher_is_better=False,
                spread={"min": 1 - r["max"], "max": 1 - r["min"]}, row="count backups",
                short=f"cost <= {BACKUPS_COST:.0%}")
    undo_on = _count(results, UNDO_KEY)
    if eo and undo_on:
        # The job's CPU seconds (rusage) for the same messages: the journal's cost is ~1-2%,
        # below what msg/s resolves on a shared machine (steal, other guests' load).
        cpu = paired_ratio(undo_on, eo, "cpu_s")
        if cpu:
            add(f"undo journal costs <= {UNDO_COST:.0%} (CPU s per message)",
                cpu["median"] - 1, UNDO_COST, "cost",
                "CPU s of the count (effectively-once) with task.dlq.stream set (each record's "
                "store writes journaled, issue #35) / without - 1, per run pair",
                higher_is_better=False, spread={"min": cpu["min"] - 1, "max": cpu["max"] - 1},
                row="count undo", short=f"cost <= {UNDO_COST:.0%} (CPU s per message)")
        _throughput_cost(add, undo_on, eo, "count (effectively-once) with the undo journal",
                         "task.dlq.stream set", "without", "count undo")
    queries_on = _count(results, QUERIES_KEY)
    if eo and queries_on:
        _query_targets(add, eo, queries_on, _count(results, QUERY_PHASES_KEY))
    eos_default = _count(results, EOS_DEFAULT_KEY)
    if eos and eos_default:
        _throughput_cost(add, eos_default, eos,
                         "exactly-once at its default commit interval (100 ms)",
                         "task.commit.ms unset", "at --commit-ms",
                         "count exactly-once default commit")
    if alo and eos:
        r = paired_ratio(eos, alo, "msgs_per_s")
        if r:
            add("exactly-once <= 25% slower than at-least-once", 1 - r["median"], 0.25,
                "fraction slower", "1 - EOS msg/s / ALO msg/s, per run pair",
                higher_is_better=False, spread={"min": 1 - r["max"], "max": 1 - r["min"]},
                row=rows["exactly-once"], short="<= 25% slower than at-least-once")

    # The same ratios on the skewed (Zipf) topic, against its own ceilings.
    skew = results.get("skew") or {}
    sk_count = skew.get("count") or {}
    if sk_count:
        inp = skew.get("input") or {}
        prefix = f"skewed (Zipf {inp.get('zipf_exponent', '?')}): "
        srows = {g: f"skew {g}" for g in rows}
        for label in ("at-least-once", "effectively-once"):
            _ceiling_targets(add, prefix, srows[label], label,
                             sk_count.get(f"millpond {label}") or {}, skew.get("limits") or {})
        _quix_targets(add, prefix, sk_count, srows)
        s_alo, s_eos = (sk_count.get("millpond at-least-once") or {},
                        sk_count.get("millpond exactly-once") or {})
        r = paired_ratio(s_eos, s_alo, "msgs_per_s") if s_alo and s_eos else None
        if r:
            add(f"{prefix}exactly-once <= 25% slower than at-least-once", 1 - r["median"], 0.25,
                "fraction slower", "1 - EOS msg/s / ALO msg/s, per run pair",
                higher_is_better=False, spread={"min": 1 - r["max"], "max": 1 - r["min"]},
                row=srows["exactly-once"], short="<= 25% slower than at-least-once")

    rss = (results.get("rss") or {}).get("count", {}).get("millpond effectively-once") or {}
    if rss.get("maxrss_mb"):
        users = ((results.get("rss") or {}).get("input") or {}).get("users", 0)
        add(f"count (effectively-once) peak RSS at {users:,} users", _med(rss["maxrss_mb"]),
            None, "MB", "informational", higher_is_better=False, spread=rss["maxrss_mb"],
            row="rss", short="peak RSS")

    if m_f and f_alo:
        r = paired_ratio(m_f, f_alo, "msgs_per_s")
        add("count >= 3x Faust (at-least-once, small topic)", _med(r), 3.0, "x",
            "millpond msg/s / Faust msg/s, per run pair", spread=r, row="faust",
            short=">= 3x Faust")

    _dataflow_targets(add, results.get("dataflow") or {})
    _windows_targets(add, results.get("windows") or {})
    _joins_targets(add, results.get("joins") or {})
    _sessions_targets(add, results.get("sessions") or {})

    restore = results.get("restore", {})
    m_rs, q_rs = restore.get("millpond restore --full") or {}, restore.get("quix recovery") or {}
    if m_rs and q_rs:
        r = paired_ratio(m_rs, q_rs, "restore_s", invert=True)
        add("restore >= 5x Quix recovery (restore time)", _med(r), 5.0, "x",
            "Quix recovery s / millpond restore s, per run pair", spread=r, row="restore",
            short=">= 5x Quix recovery")
        a, b = _good(m_rs, "process_wall_s"), _good(q_rs, "wall_to_done_s")
        walls = [y / x for x, y in zip(a, b, strict=False) if x and y]
        if walls:
            add("restore >= 5x Quix recovery (process start to restored)",
                statistics.median(walls), 5.0, "x",
                "incl. start-up (Quix: group join + recovery)",
                spread={"min": min(walls), "max": max(walls)}, row="restore",
                short=">= 5x Quix, process start to restored")

    snap = ((results.get("snapshot_restore") or {}).get("result")) or {}
    if snap.get("speedup"):
        add(f"snapshot + tail restore >= 5x full changelog replay ({snap['records']:,} "
            f"records)", snap["speedup"]["median"], 5.0, "x",
            "full replay s / snapshot + tail s (process start to exit), per run pair",
            spread=snap["speedup"], row="snapshot restore", short=">= 5x full replay")

    store = results.get("store_micro") or {}
    mp = store.get("millpond") or {}
    if mp:
        add("store put >= 500k/s (serialized + cached, distinct keys)",
            _med(mp.get("put_per_s")), 500_000, "ops/s", spread=mp.get("put_per_s"),
            row="store", short=">= 500k put/s")
        add("store get >= 700k/s (serialized + cached, distinct keys)",
            _med(mp.get("get_per_s")), 700_000, "ops/s", spread=mp.get("get_per_s"),
            row="store", short=">= 700k get/s")
    hot = (results.get("store_hot") or {}).get("millpond") or {}
    if hot:
        for op in ("put", "get"):
            add(f"store {op} of a hot key >= 1M/s (cached)", _med(hot.get(f"{op}_per_s")),
                1_000_000, "ops/s", "store_hot.py", spread=hot.get(f"{op}_per_s"),
                row="store hot", short=f">= 1M {op}/s")

    cls = results.get("restore_changelogs") or {}
    if m_rs:
        cl = cls.get("millpond") or {}
        size = cl["bytes"] / cl["records"] if cl.get("records") else None
        add("restore >= 100 MB/s, count changelog (key+value bytes)", _med(m_rs.get("mb_per_s")),
            100.0, "MB/s",
            f"its records average {size:.0f} bytes" if size else "", spread=m_rs.get("mb_per_s"),
            row="restore", short=">= 100 MB/s")
    big = restore.get("millpond restore --full (1 KB values)") or {}
    if big:
        add("restore >= 100 MB/s, synthetic 1 KB values (key+value bytes)",
            _med(big.get("mb_per_s")), 100.0, "MB/s", spread=big.get("mb_per_s"),
            row="restore 1 KB", short=">= 100 MB/s")
    scaling = (results.get("restore_scaling") or {}).get("result") or {}
    if scaling.get("runs"):
        add(f"restore peak RSS not growing with changelog size (max / min peak RSS over "
            f"{scaling['sizes'][0]:,} to {scaling['sizes'][-1]:,} records)",
            scaling["rss_growth"], 1.2, "x", "restore_scaling.py; 1.2x allows noise",
            higher_is_better=False, row="restore scaling", short="max / min <= 1.2x")
    if m_rs:
        add("restore >= 500k records/s (count changelog)", _med(m_rs.get("records_per_s")),
            500_000, "records/s", spread=m_rs.get("records_per_s"), row="restore",
            short=">= 500k records/s")

    for layout, got in (results.get("memory_cap") or {}).items():
        res = got.get("result") or {}
        phases = res.get("phases") or []
        if not phases:
            continue
        what = (f"memory cap {layout} (tasks x stores), {res.get('keys', 0):,} keys x "
                f"{res.get('value_bytes')} B in a {res.get('cap_mb')} MB cgroup")
        add(f"{what}: peak RSS (RssAnon + RssFile) of every phase <= the budget",
            max(ph["peak_rss_sum_mb"] for ph in phases), float(res.get("cap_mb") or 0), "MiB",
            ", ".join(f"{ph['phase']} {ph['peak_rss_sum_mb']:g}" for ph in phases),
            higher_is_better=False, row="memory cap", short="peak RSS <= budget")
        clean = (len(phases) == 4 and all(ph["returncode"] == 0 and not ph["oom_kills"]
                                          for ph in phases)
                 and bool((res.get("check") or {}).get("exact")))
        add(f"{what}: all 4 phases exit 0, no OOM kill, state exact", 1.0 if clean else 0.0,
            1.0, "", "; ".join(res.get("problems") or [])[:300], row="memory cap",
            short="exact, no OOM kill")

    for label, entry in (("at-least-once", alo), ("effectively-once", eo),
                         ("exactly-once", eos)):
        if entry and entry.get("msgs_per_s"):
            add(f"count ({label}) >= 150k msg/s", _med(entry["msgs_per_s"]), 150_000, "msg/s",
                spread=entry["msgs_per_s"], row=rows[label], short=">= 150k msg/s")
    return out


# ---- Markdown -------------------------------------------------------------------------------
def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "–"
    if isinstance(v, (int, float)):
        if unit in ("x",):
            return f"{v:.2f}x"
        if unit in ("fraction", "fraction slower"):
            return f"{v * 100:.0f}%"
        if unit == "cost":  # a small fraction slower: one decimal
            return f"{v * 100:.1f}%"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"
    return str(v)


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f}%"


def _row(name: str, fig: dict[str, Any] | None, unit: str, note: str = "") -> str:
    if not fig or fig.get("median") is None:
        return f"| {name} | – | – | – | 0 | {unit} | {note} |"
    return (f"| {name} | {_fmt(fig['median'], unit)} | {_fmt(fig['min'], unit)} | "
            f"{_fmt(fig['max'], unit)} | {fig['n']} | {unit} | {note} |")


def _frac(value: float | None, ceiling: float | None) -> str:
    if not value or not ceiling:
        return ""
    return f"{value / ceiling * 100:.0f}% of"


def peer_versions(meta: dict[str, Any], peer: str) -> dict[str, Any] | None:
    """The versions a peer ran with: as its runs reported them from its own virtualenv, else
    as that virtualenv's interpreter reports them; None when the peer was not run."""
    ran = (meta.get("peer_versions") or {}).get(peer)
    if ran:
        return ran
    v = meta.get("versions") or {}
    dist = {"quix": "quixstreams", "faust": "faust-streaming", "bytewax": "bytewax",
            "pathway": "pathway"}[peer]
    if peer not in (meta.get("systems") or [peer]) or not v.get(dist):
        return None
    if peer == "quix":
        return {dist: v.get(dist), "confluent-kafka": v.get("quix_confluent_kafka")}
    if peer in ("bytewax", "pathway"):
        return {dist: v.get(dist)}
    return {dist: v.get(dist), "aiokafka": v.get("faust_aiokafka"),
            "rocksdict": v.get("faust_rocksdict")}


def versions_text(meta: dict[str, Any]) -> str:
    v = meta.get("versions") or {}
    gc = f", {v['kafka_broker_gc']} collector" if v.get("kafka_broker_gc") else ""
    parts = [f"Python {v.get('python')}, Apache Kafka {v.get('kafka_broker')} (local KRaft "
             f"broker, `millpond dev kafka`{gc}), librdkafka {v.get('librdkafka')} (confluent-kafka "
             f"{v.get('confluent_kafka')}), rocksdict {v.get('rocksdict')}, millpond "
             f"{v.get('millpond')}"]
    runs_in = {"quix": {"count", "skew", "restore", "dataflow", "windows",
                        "joins"}, "faust": {"count"},
               "bytewax": {"dataflow", "windows"}, "pathway": {"count", "dataflow"}}
    ran = {peer for peer, workloads in runs_in.items()
           if peer in (meta.get("systems") or [])
           and set(meta.get("workloads") or []) & workloads}
    for peer, dist, extra in (("quix", "quixstreams", ("confluent-kafka",)),
                              ("faust", "faust-streaming", ("aiokafka", "rocksdict")),
                              ("bytewax", "bytewax", ("confluent-kafka", "orjson")),
                              ("pathway", "pathway", ())):
        pv = peer_versions(meta, peer)
        if pv and pv.get(dist):
            inner = ", ".join(f"{d} {pv.get(d)}" for d in extra if pv.get(d))
            if peer == "pathway":
                inner = "its engine's own librdkafka"
            parts.append(f"{dist} {pv[dist]}" + (f" ({inner}, in its own virtualenv)"
                                                 if inner else ""))
        elif peer in ran:
            parts.append(f"{dist} not installed (it did not run)")
    return ", ".join(parts)


def _count_rows(lines: list[str], prefix: str, count: dict[str, Any], order: list[str],
                limits: dict[str, Any]) -> None:
    """The figure rows of each count entry (rate, incl. start-up, CPU and peak RSS)."""
    consume = _med(limits.get("consume_msgs_per_s"))
    decode = _med(limits.get("consume_json_msgs_per_s"))
    for key in order + [k for k in count if k not in order]:
        entry = count.get(key)
        if not entry:
            continue
        label = f"{prefix}: {key}"
        if entry.get("wrong"):
            lines.append(f"| {label} | **WRONG** | | | {entry['all_runs']} | msg/s | final "
                         f"counts differ from the reference |")
            continue
        if not entry.get("good_runs"):
            lines.append(f"| {label} | **FAILED** | | | {entry['all_runs']} | msg/s | "
                         f"see problems |")
            continue
        rate = entry.get("msgs_per_s")
        note = ("its Kafka read's start → `pw.run()` returned" if key == PATHWAY_KEY
                else "first message → process end")
        if key.startswith("millpond") and "small topic" not in key:
            shares = [f"{_frac(_med(rate), c)} {what}" for c, what in
                      ((consume, "raw consume"), (decode, "consume + decode")) if c]
            if shares:
                note += "; " + ", ".join(shares)
        lines.append(_row(label, rate, "msg/s", note))
        lines.append(_row("  ↳ incl. start-up", entry.get("msgs_per_s_incl_startup"), "msg/s",
                          f"process start → end; start-up {_fmt(_med(entry.get('startup_s')))} s"))
        if entry.get("msgs_per_s_to_90pct_sent"):
            lines.append(_row("  ↳ to 90% of the counts sent", entry["msgs_per_s_to_90pct_sent"],
                              "msg/s", "90% of the input / first message → 90% of the output "
                              "records sent (CreateTime); the last was sent "
                              f"{_fmt(_med(entry.get('last_output_s')))} s after the first "
                              f"message, the process ended "
                              f"{_fmt(_med(entry.get('end_after_last_output_s')))} s after it"))
        lines.append(_row("  ↳ CPU", entry.get("cpu_s_per_million"), "CPU s / 1M msgs",
                          "whole child process (wait4)"))
        lines.append(_row("  ↳ peak RSS", entry.get("maxrss_mb"), "MB",
                          "VmHWM of the process"))
        if entry.get("queries_per_s"):
            run0 = (entry.get("runs") or [{}])[0].get("queries") or {}
            lines.append(_row("  ↳ gets answered", entry["queries_per_s"], "q/s",
                              f"driver paced at {run0.get('rate', 0):g}/s over "
                              f"{run0.get('connections')} keep-alive connections, "
                              f"{run0.get('routed_share', 0):.0%} routed; 200s while the job "
                              "processed"))
            for field, what in (("query_p50_ms", "p50"), ("query_p99_ms", "p99")):
                lines.append(_row(f"  ↳ get latency {what}", entry.get(field), "ms",
                                  "send to answer, at the driver"))
            lines.append(_row("  ↳ driver CPU", entry.get("driver_cpu_s"), "CPU s",
                              "the query driver's own process (not in the job's CPU); on 2 "
                              "cores it competes with the job"))
            phases = [(r.get("queries") or {}).get("phases") for r in entry.get("runs") or []
                      if r.get("correct")]
            phases = [p for p in phases if p]
            if phases:
                for field, what in (("on_msgs_per_s", "with queries"),
                                    ("off_msgs_per_s", "without")):
                    lines.append(_row(f"  ↳ msg/s in the phases {what}",
                                      summarize([p[field] for p in phases]), "msg/s",
                                      f"{run0.get('phase_s', 0):g} s phases, alternating, "
                                      "from the job's processed count at each phase's start"))


COUNT_ORDER = ["millpond at-least-once", "millpond effectively-once", METRICS_KEY, BACKUPS_KEY,
               UNDO_KEY, QUERIES_KEY, QUERY_PHASES_KEY,
               "millpond exactly-once", EOS_DEFAULT_KEY,
               "quix at-least-once", "quix exactly-once", PATHWAY_KEY,
               "millpond at-least-once (small topic)",
               "faust at-least-once (small topic)"]


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    m, s = meta["machine"], meta["sizes"]
    lines = ["# millpond benchmark results", ""]
    lines += [
        f"Measured {meta['date']} with `{meta['command']}`"
        + (" (**--quick sizes: not representative**)" if meta.get("quick") else "") + ".",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB RAM, Linux "
        f"{m.get('kernel', '')}; load average at start {m.get('load_average_start')}, at end "
        f"{m.get('load_average_end')}; CPU steal during the run "
        f"{m.get('cpu_steal_percent', '?')}% (time the hypervisor gave other guests).",
        f"- Versions: {versions_text(meta)}.",
        f"- Input: {s['messages']:,} JSON messages (~"
        f"{(results.get('input') or {}).get('avg_value_bytes', '?')} bytes each), "
        f"{s['users']:,} distinct `user_id` keys, {s['partitions']} partitions; one process "
        f"per system; commit interval {meta['commit_ms']} ms for every system; each run a "
        f"fresh job/group and empty state. Figures are the median of the runs (min, max "
        f"beside); ratios are taken per run pair.",
        "",
    ]

    lines += ["| figure | median | min | max | runs | unit | notes |",
              "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
    limits = results.get("limits") or {}
    store = results.get("store_micro") or {}
    raw = store.get("raw_rocksdict") or {}
    consume = _med(limits.get("consume_msgs_per_s"))
    if limits:
        lines.append(_row("**Ceiling**: raw confluent-kafka produce",
                          limits.get("produce_msgs_per_s"), "msg/s", "the input, to a new topic"))
        lines.append(_row("**Ceiling**: raw confluent-kafka consume",
                          limits.get("consume_msgs_per_s"), "msg/s",
                          "consume(1000) batches, value touched"))
        lines.append(_row("**Ceiling**: raw consume + JSON decode",
                          limits.get("consume_json_msgs_per_s"), "msg/s",
                          f"each value through {limits.get('json_decoder') or 'orjson'}"))
    if raw:
        lines.append(_row("**Ceiling**: raw rocksdict put (100 B values)", raw.get("put_per_s"),
                          "ops/s", "from store_micro.py"))
        lines.append(_row("**Ceiling**: raw rocksdict get", raw.get("get_per_s"), "ops/s",
                          "from store_micro.py"))

    count = results.get("count") or {}
    _count_rows(lines, "count", count, COUNT_ORDER, limits)

    skew = results.get("skew") or {}
    if skew.get("count") or skew.get("limits"):
        sl, si = skew.get("limits") or {}, skew.get("input") or {}
        what = (f"{si.get('messages', 0):,} msgs, Zipf {si.get('zipf_exponent')} over "
                f"{si.get('users', 0):,} users ({si.get('distinct_users', 0):,} seen)")
        lines.append(_row("**Skewed ceiling**: raw consume", sl.get("consume_msgs_per_s"),
                          "msg/s", what))
        lines.append(_row("**Skewed ceiling**: raw consume + JSON decode",
                          sl.get("consume_json_msgs_per_s"), "msg/s", "orjson"))
        _count_rows(lines, "skewed count", skew.get("count") or {}, COUNT_ORDER, sl)

    df = results.get("dataflow") or {}
    if df.get("count") or df.get("limits"):
        dl = df.get("limits") or {}
        lines.append(_row("**Dataflow ceiling**: raw consume", dl.get("consume_msgs_per_s"),
                          "msg/s", "the input topic, once per round of the dataflow workload"))
        lines.append(_row("**Dataflow ceiling**: raw consume + JSON decode",
                          dl.get("consume_json_msgs_per_s"), "msg/s", "orjson"))
        if dl.get("state_stack_msgs_per_s"):
            lines.append(_row("**Dataflow ceiling**: + a count in the store stack (bare loop)",
                              dl.get("state_stack_msgs_per_s"), "msg/s",
                              "benchmarks/bare_state.py: no run loop, changelog or commits"))
            lines.append(_row("**Dataflow ceiling**: + a count in a dict (bare loop)",
                              dl.get("state_dict_msgs_per_s"), "msg/s",
                              "benchmarks/bare_state.py"))
        _count_rows(lines, "dataflow workload", df.get("count") or {}, list(DF_KEYS.values()),
                    dl)

    win = results.get("windows") or {}
    if win.get("runs"):
        wl, wi = win.get("limits") or {}, win.get("input") or {}
        decode = [c.get("msgs_per_s") for c in (wl.get("runs") or {}).get("consume_json", [])]
        if decode:
            lines.append(_row("**Windows topic ceiling**: raw consume + JSON decode",
                              summarize([d for d in decode if d]), "msg/s",
                              f"{wi.get('messages', 0):,} msgs, ts over "
                              f"{wi.get('span_ms', 0) // 1000} s, "
                              f"{wi.get('windows_expected', 0):,} windows expected"))
        _count_rows(lines, "windows workload", win["runs"], list(WIN_KEYS.values()), {})

    joins = results.get("joins") or {}
    if joins.get("runs"):
        _count_rows(lines, "joins workload", joins["runs"], list(JOIN_KEYS.values()), {})
    ses = results.get("sessions") or {}
    if ses.get("runs"):
        si = ses.get("input") or {}
        lines.append(f"| **Sessions topic** | | | | | | {si.get('messages', 0):,} msgs over "
                     f"{si.get('users', 0):,} users, ts over {si.get('span_ms', 0) // 60_000} "
                     f"min, gap {si.get('gap_ms', 0) // 60_000} min: "
                     f"{si.get('sessions_expected', 0):,} sessions and "
                     f"{si.get('windows_expected', 0):,} windows expected |")
        _count_rows(lines, "sessions workload", ses["runs"],
                    [_ses_key(k, mb) for mb in _ses_budgets(ses) for k in SES_KEYS.values()],
                    {})

    rss = results.get("rss") or {}
    if rss.get("count"):
        ri = rss.get("input") or {}
        _count_rows(lines, f"count, {ri.get('users', 0):,} users", rss["count"], COUNT_ORDER,
                    {})

    restore = results.get("restore") or {}
    cls = results.get("restore_changelogs") or {}
    for key, entry in restore.items():
        if entry.get("wrong") or not entry.get("good_runs"):
            lines.append(f"| restore: {key} | **{'WRONG' if entry.get('wrong') else 'FAILED'}**"
                         f" | | | {entry['all_runs']} | s | see problems |")
            continue
        system = "millpond" if key.startswith("millpond") else "quix"
        cl = cls.get({"millpond restore --full": "millpond", "quix recovery": "quix",
                      "millpond restore --full (1 KB values)": "millpond (1 KB values)"}
                     .get(key, key)) or {}
        lines.append(_row(f"restore: {key}", entry.get("restore_s"), "s",
                          f"{cl.get('records', 0):,} changelog records, "
                          f"{cl.get('bytes', 0) / 1e6:.1f} MB key+value"))
        rps = _med(entry.get("records_per_s"))
        lines.append(_row("  ↳ records/s", entry.get("records_per_s"), "records/s",
                          f"{rps / consume:.2f}x the raw consume rate of the input"
                          if rps and consume else ""))
        lines.append(_row("  ↳ MB/s", entry.get("mb_per_s"), "MB/s", "key+value bytes"))
        wall = entry.get("process_wall_s") if system == "millpond" else entry.get("wall_to_done_s")
        lines.append(_row("  ↳ process start → restored", wall, "s",
                          "incl. start-up" + ("; Quix: group join + recovery"
                                              if system == "quix" else "")))
        lines.append(_row("  ↳ peak RSS", entry.get("maxrss_mb"), "MB", "restoring process"))

    scaling = (results.get("restore_scaling") or {}).get("result") or {}
    for run in scaling.get("runs") or []:
        lines.append(f"| restore of {run['records']:,} records (~{run['bytes'] / run['records']:.0f} B)"
                     f" | {_fmt(run['maxrss_mb'])} | | | 1 | MB peak RSS | "
                     f"{_fmt(run['records_per_s'])} records/s, {_fmt(run['mb_per_s'])} MB/s; "
                     "restore_scaling.py |")

    mp = store.get("millpond") or {}
    if mp:
        lines.append(_row("store put (serialized + cached)", mp.get("put_per_s"), "ops/s",
                          _frac(_med(mp.get("put_per_s")), _med(raw.get("put_per_s")))
                          + " raw"))
        lines.append(_row("store get (serialized + cached)", mp.get("get_per_s"), "ops/s",
                          _frac(_med(mp.get("get_per_s")), _med(raw.get("get_per_s")))
                          + " raw"))
    hot = results.get("store_hot") or {}
    for op, what in (("put", "put"), ("get", "get"), ("increment", "get + put (the count's)")):
        h_raw = (hot.get("raw_rocksdict") or {}).get(f"{op}_per_s")
        h_mp = (hot.get("millpond") or {}).get(f"{op}_per_s")
        if h_raw:
            lines.append(_row(f"hot key {what}: raw rocksdict", h_raw, "ops/s",
                              "one key, bytes in and out; store_hot.py"))
        if h_mp:
            lines.append(_row(f"hot key {what}: millpond cached store", h_mp, "ops/s",
                              _frac(_med(h_mp), _med(h_raw)) + " raw; json values"))
    spark = results.get("spark_rebuild")
    if spark:
        figs = spark.get("figures") or {}
        first = (spark.get("runs") or [{}])[0]
        what = (f"{first.get('records', '?'):,} records, {first.get('master', '')}"
                if isinstance(first.get("records"), int) else "")
        for k, unit in (("records_per_second", "records/s"), ("rebuild_seconds", "s"),
                        ("spark_startup_seconds", "s")):
            if k in figs:
                lines.append(_row(f"Spark rebuild: {k.replace('_', ' ')}", figs[k], unit,
                                  f"spark_rebuild.py; {what}"))
    large = results.get("spark_rebuild_large")
    if large:
        figs = large.get("figures") or {}
        first = (large.get("runs") or [{}])[0]
        what = (f"spark_rebuild.py; {first.get('records', '?'):,} records of 1 KB, "
                f"{first.get('master', '')}, driver {first.get('driver_memory', '?')}, "
                "RocksDB dirs" if isinstance(first.get("records"), int) else "spark_rebuild.py")
        for k, label, unit in (
                ("records_per_second", "rebuild", "records/s"),
                ("rebuild_peak_rss_mb", "rebuild peak RSS (process tree)", "MB"),
                ("audit_records_per_second", "audit of the dirs", "records/s"),
                ("audit_peak_rss_mb", "audit peak RSS (process tree)", "MB"),
                ("millpond_restore_records_per_second", "beside it: millpond restore --full",
                 "records/s"),
                ("millpond_restore_peak_rss_mb", "millpond restore peak RSS", "MB")):
            if k in figs:
                lines.append(_row(f"Spark at its defaults, 1 KB values: {label}", figs[k], unit,
                                  what))
    boot = results.get("spark_bootstrap")
    if boot:
        figs = boot.get("figures") or {}
        first = (boot.get("runs") or [{}])[0]
        what = (f"{first.get('records', '?'):,} Parquet rows, {first.get('master', '')}"
                if isinstance(first.get("records"), int) else "")
        for k, unit in (("records_per_second", "records/s"), ("bootstrap_seconds", "s"),
                        ("spark_startup_seconds", "s")):
            if k in figs:
                lines.append(_row(f"Spark bootstrap: {k.replace('_', ' ')}", figs[k], unit,
                                  f"spark_bootstrap.py; {what}"))
    snap = ((results.get("snapshot_restore") or {}).get("result")) or {}
    if snap.get("figures"):
        what = (f"snapshot_restore.py; {snap['records']:,} records, tail "
                f"{snap['tail_percent']:g}%; stores equal: {snap['stores_equal']}")
        for mode, label in (("full", "full changelog replay"), ("backup", "snapshot + tail")):
            f = snap["figures"][mode]
            lines.append(_row(f"restore onto empty dir: {label}", f["wall_s"], "s", what))
            lines.append(_row("  ↳ downloaded", {k: (v / 1e6 if isinstance(v, (int, float))
                                                    else v) for k, v in
                                                  f["downloaded_bytes"].items()
                                                  if k != "runs"}, "MB",
                              "changelog key+value bytes, plus the snapshot's files"))
            lines.append(_row("  ↳ peak RSS", f["maxrss_mb"], "MB", "the restoring process"))
    for layout, got in (results.get("memory_cap") or {}).items():
        res = got.get("result") or {}
        what = (f"memory_cap.py; {res.get('keys', 0):,} keys x {res.get('value_bytes')} B, "
                f"budget {res.get('cap_mb')} MiB, exact: {(res.get('check') or {}).get('exact')}")
        for ph in res.get("phases") or []:
            name = f"memory cap {layout}, {ph['phase']}"
            lines.append(_row(f"{name}: peak RSS (anon + file)",
                              summarize([ph["peak_rss_sum_mb"]]), "MiB",
                              f"{what}; budget {ph['budget_mb']:g} MiB, exit "
                              f"{ph['returncode']}, OOM kills {ph['oom_kills']}"))
            lines.append(_row("  ↳ cgroup peak (page cache incl.)",
                              summarize([ph["cgroup_peak_mb"]]), "MiB", ""))
            lines.append(_row("  ↳ wall", summarize([ph["wall_s"]]), "s", ""))
    lines.append("")
    lines += latency_table(results)
    lines += handover_table(results)

    tg = results.get("targets") or []
    if tg:
        lines += ["| target | measured (median) | min – max | result |",
                  "| --- | ---: | ---: | --- |"]
        for t in tg:
            spread = (f"{_fmt(t['min'], t['unit'])} – {_fmt(t['max'], t['unit'])}"
                      if t.get("min") is not None else "")
            status = {"pass": "pass", "miss": "**miss**", "n/a": "n/a",
                      "info": "info"}[t["status"]]
            detail = f" ({t['detail']})" if t.get("detail") else ""
            lines.append(f"| {t['target']}{detail} | {_fmt(t['value'], t['unit'])} | {spread} "
                         f"| {status} |")
        lines.append("")

    notes = [
        "msg/s is messages / (first message processed → end), where the end is the process "
        "exit for millpond (after its final commit and close), the return of `app.run()` "
        "for Quix Streams (after its final checkpoint) and the end of `worker.stop()` for "
        "Faust; 'incl. start-up' counts from process start. CPU is the child's user+system "
        "time from `wait4`, start-up included.",
        "Every count is verified: millpond through `millpond store dump`, Quix Streams and "
        "Faust by reading their RocksDB state directories after the run; restores the same "
        "way after rebuilding. A run whose counts differ from the reference is WRONG and "
        "not used as a speed.",
    ]
    if count.get(PATHWAY_KEY):
        notes.append(
            "Pathway (benchmarks/peers/pathway_count.py) runs `pw.io.kafka.read(..., "
            "format=\"json\", mode=\"static\")` -> `groupby(user_id).reduce(count)` -> "
            "`pw.io.jsonlines.write`, one worker thread, persistence on "
            "(`Backend.filesystem`, `snapshot_interval_ms` = the commit interval, its default "
            "mode PERSISTING). Its counts reach its output only as each minibatch (1.5 s of "
            "reading, its default) has been processed, so no output marks its first message: "
            "its 'first message' is the start of its Kafka read (the engine's log record "
            "written just before the connector's first fetch), its end the return of "
            "`pw.run()`; its counts are its output's update rows replayed (`diff` +1/-1), "
            "read after the run.")
    if restore:
        notes.append(
        "Restore: `millpond restore --full` (seconds = the sum of the per-partition restore "
        "times it prints) against Quix Streams recovery of the same count's state after "
        "deleting its state dir (seconds = its `do_recovery` call). The two changelogs "
        "differ in size: millpond logs each write that leaves its object cache (Samza's "
        "design), Quix logs each key once per checkpoint.")
    small = results.get("faust_input") or {}
    if count.get("faust at-least-once (small topic)") and small:
        notes.append(
            f"Faust counts a smaller topic: {small['messages']:,} messages over "
            f"{small['users']:,} users from the same generator (the same messages per user); "
            f"at its ~1k msg/s the full input would take half an hour or more per run. "
            f"millpond at-least-once counts that topic too, and the Faust ratio pairs those "
            f"runs.")
    if count.get("faust at-least-once (small topic)"):
        linger = meta.get("faust_linger_ms")
        notes.append(
            "Faust runs with `store=rocksdb://` (rocksdict driver), `processing_guarantee="
            "at_least_once`, web server off"
            + (f", `producer_linger_ms={linger}` (librdkafka's default linger, as Quix has; "
               f"millpond's producers linger 1 ms; Faust's default 0 sends every changelog "
               f"record in its own request and ran ~2x slower in a trial)"
               if linger is not None and linger >= 0 else "")
            + ".")
    if s["messages"] != 2_000_000:
        notes.insert(0, f"The input had {s['messages']:,} messages, not the harness default of "
                        f"2,000,000 (set with `--messages`{', tiny --quick sizes' if meta.get('quick') else ' to keep the whole run under 25 minutes on this shared 2-core machine'}).")
    if mp:
        notes.append("Store micro-benchmark (benchmarks/store_micro.py, 1 thread, 100-byte values, "
                     "random key order): raw rocksdict does one `put` per key; millpond's store "
                     "(string key serde, bytes value serde, object cache with its defaults) "
                     "writes through WriteBatches, so its put rate can exceed the raw per-key "
                     "rate.")
    si = skew.get("input") or {}
    if si:
        notes.append(
            f"Skewed input: {si['messages']:,} messages whose keys are drawn from a Zipf law "
            f"(exponent {si.get('zipf_exponent')}, seed {si.get('seed')}: "
            f"`random.Random(seed).choices` over the cumulative weights r^-s of "
            f"{si['users']:,} ranks, ranks spread over user numbers by a fixed permutation): "
            f"{si.get('distinct_users', 0):,} distinct users, the hottest with "
            f"{(si.get('hottest_user_share') or 0):.1%} of the messages and the top 100 with "
            f"{(si.get('top_100_users_share') or 0):.1%}; messages per partition "
            f"{si.get('messages_per_partition')}. Its two ceilings are measured on that topic, "
            f"one of each before each round of counts.")
    hop = df.get("hop") or {}
    if df.get("count"):
        notes.append(
            "Dataflow workload: `millpond dataflow` is `app.source(input).count(\"counts\")` "
            "(benchmarks/jobs.py:count_app, run by `millpond run --bounded` like the StreamTask "
            "count, whose runs sit in the same rounds); Bytewax 0.21 runs kafka input -> "
            "key_on user_id (orjson) -> stateful_map count -> a discarding output, one worker, "
            "recovery on (SQLite snapshots, one epoch per commit interval), and its counts are "
            "read back from the last committed epoch's snapshots. The hop: one-stage is "
            "filter -> count -> to, two-stage filter -> key_by -> count -> to, the filter "
            f"{hop.get('filter', '')}, the new key {hop.get('new_key', '')}; both count the "
            f"{hop.get('kept_messages', 0):,} kept records and send every new count to one "
            "output topic. Rounds alternate their order; the ceilings are measured at the "
            "start of each round.")
    ri = rss.get("input") or {}
    if ri:
        notes.append(
            f"Peak RSS at {ri['users']:,} users: the millpond count with defaults "
            f"(effectively-once, object cache and RocksDB options as shipped) on a uniform "
            f"topic of {ri['messages']:,} messages over {ri['users']:,} users; peak RSS is the "
            f"job process's VmHWM, polled every 50 ms.")
    if hot:
        hr = hot.get("result") or {}
        notes.append(
            f"Hot key (benchmarks/store_hot.py, 1 thread): {hr.get('ops', 0):,} puts, then as "
            f"many gets, then as many get + put increments of the one key `{hr.get('key')}`. "
            f"millpond's store is `build_store` with the count job's serdes (string keys, json "
            f"int values) and object.cache.size={hr.get('cache_size')}; raw rocksdict gets "
            f"pre-encoded bytes and reaches RocksDB's memtable on every call.")
    spark_runs = meta.get("spark_runs", meta["runs"])
    if (meta.get("peer_runs", meta["runs"]) < meta["runs"]
            or meta.get("faust_runs", meta["runs"]) < meta["runs"] or spark_runs < meta["runs"]):
        notes.append(f"Runs: {meta['runs']} of every millpond figure, of Faust "
                     f"({meta['faust_runs']}) and of Quix Streams recovery; Quix Streams counts "
                     f"{meta['peer_runs']} per guarantee (minutes per run); Spark rebuild "
                     f"{spark_runs} (fewer to fit the time budget; a ratio over fewer pairs "
                     f"rests on those runs only).")
    problems = results.get("problems") or []
    lines += ["Notes:", ""] + [f"- {n}" for n in notes]
    conds = results.get("workload_conditions") or {}
    if conds:
        lines += ["", "Conditions per workload (every run's own load average and CPU steal are "
                  "in results.json):", ""]
        for w, c in conds.items():
            lines.append(f"- {w}: {c.get('seconds')} s, load average {c.get('load_average_before')}"
                         f" before and {c.get('load_average_after')} after, CPU steal "
                         f"{_pct(c.get('cpu_steal_percent'))}")
    if problems:
        lines += ["", "Problems (failed, WRONG or missing):", ""]
        lines += [f"- {p.splitlines()[0][:400]}" for p in problems]
    lines.append("")
    return "\n".join(lines)


# ---- the latency workload (benchmarks/workloads/latency.py) ---------------------------------
def _latency_groups(results: dict[str, Any]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The latency workload's rows by (guarantee, commit ms), in the order they ran."""
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for entry in ((results.get("latency") or {}).get("rows") or {}).values():
        out.setdefault((entry.get("guarantee"), entry.get("commit_ms")), []).append(entry)
    return out


def _ms(fig: dict[str, Any] | None) -> str:
    """A latency figure: its median, with (min - max) over more than one run."""
    if not fig or fig.get("median") is None:
        return "–"
    text = _fmt(fig["median"])
    return text + (f" ({_fmt(fig['min'])} – {_fmt(fig['max'])})" if fig.get("n", 0) > 1
                   else "")


def _lost(entry: dict[str, Any]) -> str:
    if entry.get("wrong"):
        return "**WRONG**: " + "; ".join(
            f"{(r.get('examples') or {}).get('missing', r.get('missing'))} missing, "
            f"{r.get('duplicates')} twice" for r in entry.get("runs", []) if not r.get("correct"))
    return "none lost" if entry.get("good_runs") else "**FAILED**"


def _latency_cell(entries: list[dict[str, Any]]) -> str:
    """One system's latency rows of a guarantee in one cell: per input rate, p50 / p99 /
    p99.9 / max, the rate achieved and whether every input came out."""
    parts = []
    for e in entries:
        head = f"{_many(e.get('rate') or 0)} msg/s"
        if not e.get("good_runs"):
            parts.append(f"{head}: {_lost(e)}")
            continue
        parts.append(f"{head}: p50 {_ms(e.get('p50_ms'))} / p99 {_ms(e.get('p99_ms'))} / "
                     f"p99.9 {_ms(e.get('p99_9_ms'))} / max {_ms(e.get('max_ms'))} ms "
                     f"({_n(_med(e.get('achieved_rate')))} msg/s achieved, {_lost(e)})")
    return "; ".join(parts)


def handover_table(results: dict[str, Any]) -> list[str]:
    """results.md's hand-over lines (empty when the workload did not run)."""
    res = results.get("handover")
    if not res:
        return []
    if not res.get("ok"):
        return [f"Hand-over (`--only handover`): **FAILED** ({res.get('error')})", ""]
    st = res["steady"]
    lines = [
        f"Hand-over (`--only handover`, benchmarks/workloads/handover.py): the latency "
        f"workload's at-least-once count at {res['rate']:,} msg/s in one process; a second "
        f"process of the job starts, then stops (SIGTERM). Worst latency of the messages "
        f"produced in the {res['window_s']:g} s after each event, for the tasks that stayed and the "
        f"ones that moved ({res['moved']}); steady p50 {st['p50']:.1f} ms, p99 "
        f"{st['p99']:.1f} ms before it. {res['produced']:,} messages, "
        f"{res['missing']} missing.", "",
        "| event | stayed: worst ms | moved: worst ms |", "| --- | ---: | ---: |"]
    for name, key in (("scale-out (1 -> 2 processes)", "out"),
                      ("scale-in (2 -> 1, SIGTERM)", "back")):
        ph = res[key]
        lines.append(f"| {name} | {ph['stayed_max_ms']:.0f} | {ph['moved_max_ms']:.0f} |")
    if st.get("max") is not None:  # (results from before the baseline row had none)
        window = res.get("steady_window_s")
        lines.append(f"| steady, one process, no rebalance"
                     f"{f' ({window:.0f} s before the scale-out)' if window else ''} | "
                     f"{st['max']:.0f} | |")
    return [*lines, ""]


def latency_table(results: dict[str, Any]) -> list[str]:
    """results.md's latency table: a row per system, guarantee, commit interval and rate."""
    lat = results.get("latency") or {}
    rows = lat.get("rows") or {}
    if not rows:
        return []
    li = lat.get("input") or {}
    lines = [
        f"End-to-end latency (`--only latency`, benchmarks/workloads/latency.py): a keyed "
        f"count that sends one output record per input message; the input produced at a fixed "
        f"rate ({li.get('producer')}) for {li.get('seconds', 0):g} s after a "
        f"{li.get('warmup_s', 0):g} s warm-up that is not measured (it begins once the job's "
        f"first output was seen), {li.get('users', 0):,} users, {li.get('partitions')} "
        f"partitions. Latency = when the reader saw the output record - the input's produce "
        f"time (`ts_ms`); the reader ({li.get('reader')}) reads `read_committed` under "
        f"exactly-once, `read_uncommitted` otherwise. Every input must come out (exactly once "
        f"under exactly-once). The producer stamps `ts_ms` at each `produce` call, so a "
        f"message it sent late (behind its schedule, e.g. while the harness was not "
        f"scheduled) is timed from when it was sent. The `floor` rows are the same count as "
        f"a bare confluent-kafka loop (benchmarks/latency_floor.py: no store, no commits): "
        f"what the client, the broker and the machine give on their own in the same run.",
        "",
        "| system | guarantee | commit ms | rate msg/s | achieved msg/s | producer behind "
        "(max ms) | outputs | lost | p50 ms | p99 ms | p99.9 ms | max ms | job CPU s | CPU "
        "steal | CPU pressure | load before → after |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | --- |"]
    for e in rows.values():
        loads = ", ".join(f"{(b or ['?'])[0]} → {(a or ['?'])[0]}" for b, a in
                          zip(e.get("load_average_before") or [],
                              e.get("load_average_after") or [], strict=False))
        lines.append(
            f"| {e.get('system')} | {e.get('guarantee')} | {e.get('commit_ms')} | "
            f"{_n(e.get('rate'))} | {_n(_med(e.get('achieved_rate')))} | "
            f"{_n(_med(e.get('max_behind_ms')))} | {_n(_med(e.get('outputs')))} | {_lost(e)} | {_ms(e.get('p50_ms'))} | "
            f"{_ms(e.get('p99_ms'))} | {_ms(e.get('p99_9_ms'))} | {_ms(e.get('max_ms'))} | "
            f"{_n(_med(e.get('cpu_s')))} | {_pct(_med(e.get('cpu_steal_percent')))} | "
            f"{_pressure(e.get('cpu_pressure_percent'))} | {loads} |")
    return [*lines, ""]


def _pressure(summary: dict[str, Any] | None) -> str:
    """A row's CPU pressure: the median, with every run's figure when there were several
    (a noisy round stands out: a host burst or the run's own demand over the cores)."""
    runs = (summary or {}).get("runs") or []
    if len(runs) <= 1:
        return _pct(_med(summary))
    return f"{_pct(_med(summary))} ({', '.join(_pct(r) for r in runs)})"


# ---- the README's Benchmarks block -----------------------------------------------------------
README_BEGIN = "<!-- bench-table: generated by benchmarks/report.py from results.json -->"
README_END = "<!-- /bench-table -->"
STATUS = {"pass": "pass", "miss": "**miss**", "n/a": "n/a", "info": "info"}
NO_MODE = "no effectively-once (ratio taken to its at-least-once)"


def _n(v: float | None, unit: str = "") -> str:
    return "–" if v is None else _fmt(v, unit)


def _count_cell(entry: dict[str, Any] | None, wall: bool = False) -> str:
    """A count in one cell: msg/s, CPU per 1M messages, peak RSS (or WRONG / FAILED); with
    ``wall`` also msg/s from process start and the start-up seconds."""
    if not entry:
        return ""
    if entry.get("wrong"):
        return "**WRONG**"
    if not entry.get("good_runs"):
        return "**FAILED**"
    since_start = (f" ({_n(_med(entry.get('msgs_per_s_incl_startup')))} msg/s incl. "
                   f"{_n(_med(entry.get('startup_s')))} s start-up)" if wall else "")
    return (f"{_n(_med(entry.get('msgs_per_s')))} msg/s{since_start}, "
            f"{_n(_med(entry.get('cpu_s_per_million')))} CPU s/1M, "
            f"{_n(_med(entry.get('maxrss_mb')))} MB")


def _ceiling_cell(limits: dict[str, Any]) -> str:
    c, d = _med(limits.get("consume_msgs_per_s")), _med(limits.get("consume_json_msgs_per_s"))
    if c is None and d is None:
        return ""
    return f"consume {_n(c)} msg/s; + JSON decode {_n(d)} msg/s"


def _restore_cell(entry: dict[str, Any] | None, quix: bool = False) -> str:
    if not entry:
        return ""
    if entry.get("wrong") or not entry.get("good_runs"):
        return "**WRONG**" if entry.get("wrong") else "**FAILED**"
    parts = [f"{_n(_med(entry.get('restore_s')))} s"]
    if entry.get("records_per_s"):
        parts.append(f"{_n(_med(entry.get('records_per_s')))} rec/s")
    if entry.get("mb_per_s"):
        parts.append(f"{_n(_med(entry.get('mb_per_s')))} MB/s")
    parts.append(f"{_n(_med(entry.get('maxrss_mb')))} MB")
    return ", ".join(parts)


def _with_unit(v: float | None, unit: str) -> str:
    text = _fmt(v, unit)
    return f"{text} {unit}" if v is not None and unit in ("MB", "MB/s", "msg/s", "ops/s",
                                                          "records/s", "q/s", "ms") else text


def _target_cell(ts: list[dict[str, Any]]) -> str:
    return "; ".join(f"{t['short']}: {_with_unit(t['value'], t['unit'])} {STATUS[t['status']]}"
                     for t in ts)


def _many(n: int) -> str:
    """2000000 -> 2M, 20000 -> 20k, 1500 -> 1,500."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{suffix}"
    return f"{n:,}"


def readme_table(results: dict[str, Any]) -> str:
    """The Benchmarks block of docs/benchmarks.md: one table from this one run, ready to paste.

    Its header names the date, machine, command, load average and CPU steal; its rows put
    the peers beside millpond on the same input, with the ceilings and each target's
    measured value and pass/miss.
    """
    meta = results["meta"]
    m = meta["machine"]
    conds = results.get("workload_conditions") or {}
    per_w = ", ".join(f"{w} {_pct(c.get('cpu_steal_percent'))}" for w, c in conds.items())
    tg = results.get("targets") or targets(results)
    by_row: dict[str, list[dict[str, Any]]] = {}
    for t in tg:
        by_row.setdefault(t.get("row") or "", []).append(t)
    inp, s = results.get("input") or {}, meta["sizes"]
    minutes = f", {meta['seconds'] / 60:.0f} minutes" if meta.get("seconds") else ""
    head = [
        README_BEGIN,
        f"Every figure below is from one `make bench` run{minutes}, "
        f"{meta['date'].replace('T', ' ').replace('+00:00', ' UTC')}: "
        f"`{meta['command']}`"
        + (" (**--quick sizes: not representative**)" if meta.get("quick") else "") + ".",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB RAM, Linux "
        f"{m.get('kernel', '')}; load average {m.get('load_average_start')} at the start and "
        f"{m.get('load_average_end')} at the end; CPU steal {_pct(m.get('cpu_steal_percent'))} "
        f"over the run" + (f" ({per_w})" if per_w else "") + ".",
        f"- Versions: {versions_text(meta)}.",
        f"- Input: JSON page views of ~{inp.get('avg_value_bytes', '?')} bytes keyed by "
        f"`user_id`, {s['partitions']} partitions, one process per system, commit interval "
        f"{meta['commit_ms']} ms for every system, a fresh job/group and empty state per run. "
        f"Each figure is the median of {meta['runs']} runs (Quix Streams "
        f"{meta.get('peer_runs', meta['runs'])}, Faust {meta.get('faust_runs', meta['runs'])});"
        f" ratios pair run i with run i. Every count and restore was checked against the exact "
        f"reference. Ceilings: raw confluent-kafka consume of the same topic, and the same "
        f"plus orjson decoding of each value (millpond's json serde). All figures with min "
        f"and max: `benchmarks/results.md`.",
        "",
        "| workload | millpond | Quix Streams | Faust | Bytewax | Pathway | ceiling | targets: "
        "measured, result |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines: list[str] = []
    used: set[str] = set()

    def row(rid: str, label: str, ours: str, quix: str = "", faust: str = "",
            ceiling: str = "", bytewax: str = "", pathway: str = "") -> None:
        used.add(rid)
        lines.append(f"| {label} | {ours} | {quix} | {faust} | {bytewax} | {pathway} | "
                     f"{ceiling} | {_target_cell(by_row.get(rid, []))} |")

    count = results.get("count") or {}
    quix_of = {"at-least-once": "quix at-least-once", "exactly-once": "quix exactly-once"}
    if count:
        what = f"{_many(s['messages'])} msgs, {_many(s['users'])} users uniform"
        for i, g in enumerate(("at-least-once", "effectively-once", "exactly-once")):
            if f"millpond {g}" not in count:
                continue
            label = (f"count, {what}, {g}" if i == 0 else f"count, uniform, {g}") + (
                " (default)" if g == "effectively-once" else "")
            q = count.get(quix_of.get(g, ""))
            # Pathway beside the default guarantee, the one its targets compare with
            pw = count.get(PATHWAY_KEY) if g == "effectively-once" else None
            row(f"count {g}", label, _count_cell(count.get(f"millpond {g}"), wall=bool(pw)),
                _count_cell(q) if q else (NO_MODE if "quix" in meta.get("systems", [])
                                          else ""),
                ceiling=_ceiling_cell(results.get("limits") or {}) if i == 0 else "",
                pathway=_count_cell(pw, wall=True))
            if g == "effectively-once" and count.get(METRICS_KEY):
                row("count metrics", "count, uniform, effectively-once, Prometheus reporter "
                    "on (scraped every 1 s)", _count_cell(count.get(METRICS_KEY)))
            if g == "effectively-once" and count.get(UNDO_KEY):
                row("count undo", "count, uniform, effectively-once, undo journal on "
                    "(`task.dlq.stream` set; nothing dead-lettered)",
                    _count_cell(count.get(UNDO_KEY)))
            if g == "effectively-once" and count.get(QUERIES_KEY):
                row("count queries", "count, uniform, effectively-once, serving gets of its "
                    "store (`job.query.address` set; a paced driver in its own process)",
                    _count_cell(count.get(QUERIES_KEY)))
            if g == "exactly-once" and count.get(EOS_DEFAULT_KEY):
                row("count exactly-once default commit", "count, uniform, exactly-once, "
                    "`task.commit.ms` unset (its default there: 100 ms)",
                    _count_cell(count.get(EOS_DEFAULT_KEY)))
    df = results.get("dataflow") or {}
    dc = df.get("count") or {}
    if dc:
        di = df.get("input") or {}
        for i, g in enumerate(("effectively-once", "exactly-once")):
            key = DF_KEYS["eo" if i == 0 else "eos"]
            if key not in dc:
                continue
            task = dc.get(DF_KEYS["task-eo" if i == 0 else "task-eos"])
            label = (f"dataflow count `source(t).count(...)`, {_many(di.get('messages', 0))} "
                     f"msgs, {_many(di.get('users', 0))} users, {g}" if i == 0
                     else f"dataflow count, {g}")
            if task:
                label += f" (StreamTask count in the same rounds: {_count_cell(task)})"
            q = dc.get(DF_KEYS["quix-alo" if i == 0 else "quix-eos"])
            row(f"dataflow {g}", label, _count_cell(dc.get(key)), _count_cell(q),
                bytewax=_count_cell(dc.get(DF_KEYS["bytewax"])),
                ceiling=_ceiling_cell(df.get("limits") or {}) if i == 0 else "",
                pathway=_count_cell(dc.get(DF_KEYS["pathway"]), wall=True) if i == 0 else "")
        one, two = dc.get(DF_KEYS["one"]), dc.get(DF_KEYS["two"])
        if one or two:
            def last(entry: dict[str, Any] | None) -> str:
                v = _med((entry or {}).get("msgs_per_s_to_90pct_sent"))
                return f" ({_n(v)} msg/s to 90% of its counts sent)" if v else ""

            row("dataflow hop", "dataflow filter -> key_by -> count -> to (two-stage) beside "
                "filter -> count -> to (one-stage), effectively-once",
                f"two-stage {_count_cell(two)}{last(two)}; one-stage {_count_cell(one)}"
                f"{last(one)}")
    wr = (results.get("windows") or {}).get("runs") or {}
    if wr.get(WIN_KEYS["windows"]):
        wi = (results.get("windows") or {}).get("input") or {}
        plain = wr.get(WIN_KEYS["count"])
        label = (f"dataflow 1-minute tumbling count per user, final results, by event time, "
                 f"{_many(wi.get('messages', 0))} msgs, {_many(wi.get('users', 0))} users, "
                 "effectively-once")
        if plain:
            label += f" (plain dataflow count of the same topic: {_count_cell(plain)})"
        q = wr.get(WIN_KEYS["quix"])
        row("windows", label, _count_cell(wr.get(WIN_KEYS["windows"])),
            _count_cell(q) if q else "", bytewax=_count_cell(wr.get(WIN_KEYS["bytewax"])))
    jr = (results.get("joins") or {}).get("runs") or {}
    if jr.get(JOIN_KEYS["join"]):
        ji = (results.get("joins") or {}).get("input") or {}
        asof = jr.get(JOIN_KEYS["asof"])
        label = (f"stream-table join: each page view with its user's profile, "
                 f"{_many(ji.get('table_rows', 0))}-row table, {_many(ji.get('messages', 0))}"
                 " stream msgs, effectively-once (the table loaded first)")
        if asof:
            label += f" (as-of join, versioned table: {_count_cell(asof)})"
        q = jr.get(JOIN_KEYS["quix"])
        row("joins", label, _count_cell(jr.get(JOIN_KEYS["join"])), _count_cell(q) if q else "")
    sr = (results.get("sessions") or {}).get("runs") or {}
    if sr.get(SES_KEYS["sessions"]):
        si = (results.get("sessions") or {}).get("input") or {}
        row("sessions", f"dataflow session-window count per user (gap "
            f"{si.get('gap_ms', 0) // 60_000} min), final results, by event time, "
            f"{_many(si.get('messages', 0))} msgs, {_many(si.get('users', 0))} users, "
            "effectively-once (1-minute tumbling count of the same topic: "
            f"{_count_cell(sr.get(SES_KEYS['tumbling']))})",
            _count_cell(sr.get(SES_KEYS["sessions"])))
    skew = results.get("skew") or {}
    sk = skew.get("count") or {}
    if sk:
        si = skew.get("input") or {}
        what = (f"{_many(si.get('messages', 0))} msgs, Zipf {si.get('zipf_exponent')} over "
                f"{_many(si.get('users', 0))} users ({si.get('distinct_users', 0):,} seen, hottest "
                f"{(si.get('hottest_user_share') or 0):.1%})")
        for i, g in enumerate(("at-least-once", "effectively-once", "exactly-once")):
            if f"millpond {g}" not in sk:
                continue
            q = sk.get(quix_of.get(g, ""))
            row(f"skew {g}", f"count, {what}, {g}" if i == 0 else f"count, skewed, {g}",
                _count_cell(sk.get(f"millpond {g}")),
                _count_cell(q) if q else (NO_MODE if "quix" in meta.get("systems", [])
                                          else ""),
                ceiling=_ceiling_cell(skew.get("limits") or {}) if i == 0 else "")

    rss = results.get("rss") or {}
    if rss.get("count"):
        ri = rss.get("input") or {}
        row("rss", f"count, {_many(ri.get('messages', 0))} msgs, {_many(ri.get('users', 0))} "
                   f"users uniform, effectively-once (default)",
            _count_cell(rss["count"].get("millpond effectively-once")))
    small = results.get("faust_input") or {}
    if count.get("faust at-least-once (small topic)"):
        row("faust", f"count, {small.get('messages', 0):,} msgs, {small.get('users', 0):,} "
                     f"users, at-least-once (Faust's size)",
            _count_cell(count.get("millpond at-least-once (small topic)")),
            faust=_count_cell(count.get("faust at-least-once (small topic)")))
    restore = results.get("restore") or {}
    cls = results.get("restore_changelogs") or {}
    if restore.get("millpond restore --full") or restore.get("quix recovery"):
        cl = cls.get("millpond") or {}
        row("restore", f"restore the count's state from its changelog "
                       f"({cl.get('records', 0):,} records, millpond `restore --full`; Quix: "
                       f"recovery on deleted state)",
            _restore_cell(restore.get("millpond restore --full")),
            _restore_cell(restore.get("quix recovery")))
    if restore.get("millpond restore --full (1 KB values)"):
        cl = cls.get("millpond (1 KB values)") or {}
        row("restore 1 KB", f"restore, {cl.get('records', 0):,} records of 1 KB",
            _restore_cell(restore.get("millpond restore --full (1 KB values)")))
    scaling = (results.get("restore_scaling") or {}).get("result") or {}
    if scaling.get("runs"):
        row("restore scaling", "restore peak RSS at "
            + " / ".join(_many(r["records"]) for r in scaling["runs"]) + " records",
            " / ".join(f"{_n(r['maxrss_mb'])}" for r in scaling["runs"]) + " MB")
    store = results.get("store_micro") or {}
    if store.get("millpond"):
        mp, raw = store["millpond"], store.get("raw_rocksdict") or {}
        ops = (store.get("result") or {}).get("ops", 0)
        row("store", f"store put / get, {ops:,} distinct keys, 100 B values",
            f"{_n(_med(mp.get('put_per_s')))} / {_n(_med(mp.get('get_per_s')))} ops/s",
            ceiling=f"raw rocksdict {_n(_med(raw.get('put_per_s')))} / "
                    f"{_n(_med(raw.get('get_per_s')))} ops/s")
    hot = results.get("store_hot") or {}
    if hot.get("millpond"):
        mp, raw = hot["millpond"], hot.get("raw_rocksdict") or {}
        row("store hot", "store put / get / get+put of one hot key (cached)",
            " / ".join(_n(_med(mp.get(f"{op}_per_s")))
                       for op in ("put", "get", "increment")) + " ops/s",
            ceiling="raw rocksdict " + " / ".join(_n(_med(raw.get(f"{op}_per_s")))
                                                  for op in ("put", "get", "increment"))
                    + " ops/s")
    spark = results.get("spark_rebuild")
    if spark:
        figs = spark.get("figures") or {}
        first = (spark.get("runs") or [{}])[0]
        rec = first.get("records")
        row("spark", f"Spark rebuild of a changelog ({first.get('master', '')}"
                     + (f", {rec:,} records" if isinstance(rec, int) else "") + ")",
            f"{_n(_med(figs.get('records_per_second')))} rec/s (+"
            f"{_n(_med(figs.get('spark_startup_seconds')))} s Spark start-up)")
    boot = results.get("spark_bootstrap")
    if boot:
        figs = boot.get("figures") or {}
        first = (boot.get("runs") or [{}])[0]
        rec = first.get("records")
        row("spark bootstrap", f"Spark bootstrap of a store from Parquet "
                               f"({first.get('master', '')}"
                               + (f", {rec:,} records" if isinstance(rec, int) else "") + ")",
            f"{_n(_med(figs.get('records_per_second')))} rec/s (+"
            f"{_n(_med(figs.get('spark_startup_seconds')))} s Spark start-up)")
    lat = results.get("latency") or {}
    li = lat.get("input") or {}
    for (guarantee, commit_ms), entries in _latency_groups(results).items():
        cells = {system: _latency_cell([e for e in entries if e.get("system") == system])
                 for system in ("millpond", "millpond-dataflow", "quix", "bytewax",
                                "pathway")}
        ours = "; ".join(f"{what}{cells[system]}" for system, what in
                         (("millpond", ""), ("millpond-dataflow", "dataflow app: "))
                         if cells[system])
        row(f"latency {guarantee} {commit_ms}",
            f"end-to-end latency of a keyed count (an output per input), {guarantee}, "
            f"commit {commit_ms} ms, {_many(li.get('users') or 0)} users, "
            f"{li.get('seconds', 0):g} s at each fixed input rate",
            ours, cells["quix"], bytewax=cells["bytewax"], pathway=cells["pathway"])
    left = [t for rid, ts in by_row.items() if rid not in used for t in ts]
    if left:
        lines.append(f"| other targets | | | | | | | "
                     f"{'; '.join(t['target'] + ': ' + _fmt(t['value'], t['unit']) + ' ' + STATUS[t['status']] for t in left)} |")
    problems = results.get("problems") or []
    tail = [""]
    if problems:
        tail += ["Problems in this run (failed, WRONG or missing):", ""]
        tail += [f"- {p.splitlines()[0][:300]}" for p in problems] + [""]
    tail.append(README_END)
    return "\n".join(head + lines + tail) + "\n"


def write_all(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json (with targets), results.md and readme-table.md into ``out_dir``."""
    import json

    results["targets"] = targets(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "results.md", out_dir / "readme-table.md"]
    paths[0].write_text(json.dumps(results, indent=2, default=str) + "\n")
    paths[1].write_text(markdown(results))
    paths[2].write_text(readme_table(results))
    return paths


def main(argv: list[str] | None = None) -> int:
    """Re-render from a results.json (targets recomputed): ``python -m benchmarks.report
    [RESULTS_JSON]`` rewrites it, results.md and readme-table.md beside it."""
    import json
    import sys

    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path(__file__).with_name("results.json")
    results = json.loads(src.read_text())
    for path in write_all(results, src.parent):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

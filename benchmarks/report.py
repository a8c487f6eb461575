"""Targets (pass/miss) and the Markdown table of a benchmark run (``results.md``)."""

from __future__ import annotations

import statistics
from typing import Any


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


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with the measured figure (median) and pass / miss / n/a."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: float | None, goal: float, unit: str, detail: str = "",
            higher_is_better: bool = True, spread: dict[str, Any] | None = None) -> None:
        if value is None:
            status = "n/a"
        elif higher_is_better:
            status = "pass" if value >= goal else "miss"
        else:
            status = "pass" if value <= goal else "miss"
        out.append({"target": name, "value": value, "goal": goal, "unit": unit,
                    "status": status, "detail": detail,
                    "min": spread.get("min") if spread else None,
                    "max": spread.get("max") if spread else None})

    alo = _count(results, "millpond at-least-once")
    eo = _count(results, "millpond effectively-once")
    eos = _count(results, "millpond exactly-once")
    q_alo = _count(results, "quix at-least-once")
    q_eos = _count(results, "quix exactly-once")
    f_alo = _count(results, "faust at-least-once (small topic)")
    m_f = _count(results, "millpond at-least-once (small topic)")

    for label, ours, theirs in (("at-least-once", alo, q_alo), ("exactly-once", eos, q_eos)):
        if ours and theirs:
            r = paired_ratio(ours, theirs, "msgs_per_s")
            add(f"count >= 3x Quix Streams ({label} vs {label})", _med(r), 3.0, "x",
                "millpond msg/s / Quix msg/s, per run pair", spread=r)
    if m_f and f_alo:
        r = paired_ratio(m_f, f_alo, "msgs_per_s")
        add("count >= 3x Faust (at-least-once, small topic)", _med(r), 3.0, "x",
            "millpond msg/s / Faust msg/s, per run pair", spread=r)

    restore = results.get("restore", {})
    m_rs, q_rs = restore.get("millpond restore --full") or {}, restore.get("quix recovery") or {}
    if m_rs and q_rs:
        r = paired_ratio(m_rs, q_rs, "restore_s", invert=True)
        add("restore >= 5x Quix recovery (restore time)", _med(r), 5.0, "x",
            "Quix recovery s / millpond restore s, per run pair", spread=r)
        a, b = _good(m_rs, "process_wall_s"), _good(q_rs, "wall_to_done_s")
        walls = [y / x for x, y in zip(a, b, strict=False) if x and y]
        if walls:
            add("restore >= 5x Quix recovery (process start to restored)",
                statistics.median(walls), 5.0, "x",
                "incl. start-up (Quix: group join + recovery)",
                spread={"min": min(walls), "max": max(walls)})

    limits = results.get("limits") or {}
    consume = _med(limits.get("consume_msgs_per_s"))
    for label, entry in (("at-least-once", alo), ("effectively-once", eo)):
        rate = _med(entry.get("msgs_per_s")) if entry else None
        if rate is not None and consume:
            add(f"count ({label}) >= 25% of raw consume", rate / consume, 0.25, "fraction",
                f"{rate:,.0f} / {consume:,.0f} msg/s")

    store = results.get("store_micro") or {}
    mp = store.get("millpond") or {}
    if mp:
        add("store put >= 500k/s (serialized + cached)", _med(mp.get("put_per_s")), 500_000,
            "ops/s", spread=mp.get("put_per_s"))
        add("store get >= 700k/s (serialized + cached)", _med(mp.get("get_per_s")), 700_000,
            "ops/s", spread=mp.get("get_per_s"))

    cls = results.get("restore_changelogs") or {}
    if m_rs:
        cl = cls.get("millpond") or {}
        size = cl["bytes"] / cl["records"] if cl.get("records") else None
        add("restore >= 100 MB/s, count changelog (key+value bytes)", _med(m_rs.get("mb_per_s")),
            100.0, "MB/s",
            f"its records average {size:.0f} bytes" if size else "", spread=m_rs.get("mb_per_s"))
    big = restore.get("millpond restore --full (1 KB values)") or {}
    if big:
        add("restore >= 100 MB/s, synthetic 1 KB values (key+value bytes)",
            _med(big.get("mb_per_s")), 100.0, "MB/s", spread=big.get("mb_per_s"))
    scaling = (results.get("restore_scaling") or {}).get("result") or {}
    if scaling.get("runs"):
        add(f"restore peak RSS not growing with changelog size (max / min peak RSS over "
            f"{scaling['sizes'][0]:,} to {scaling['sizes'][-1]:,} records)",
            scaling["rss_growth"], 1.2, "x", "restore_scaling.py; 1.2x allows noise",
            higher_is_better=False)
    if m_rs:
        add("restore >= 500k records/s (count changelog)", _med(m_rs.get("records_per_s")),
            500_000, "records/s", spread=m_rs.get("records_per_s"))

    for label, entry in (("at-least-once", alo), ("effectively-once", eo),
                         ("exactly-once", eos)):
        if entry and entry.get("msgs_per_s"):
            add(f"count ({label}) >= 150k msg/s", _med(entry["msgs_per_s"]), 150_000, "msg/s",
                spread=entry["msgs_per_s"])
    if alo and eos:
        r = paired_ratio(eos, alo, "msgs_per_s")
        if r:
            slower = {k: (1 - r[k]) if isinstance(r[k], float) else r[k] for k in ("median",)}
            add("exactly-once <= 25% slower than at-least-once", slower["median"], 0.25,
                "fraction slower", "1 - EOS msg/s / ALO msg/s, per run pair",
                higher_is_better=False,
                spread={"min": 1 - r["max"], "max": 1 - r["min"]})
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
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.2f}"
    return str(v)


def _row(name: str, fig: dict[str, Any] | None, unit: str, note: str = "") -> str:
    if not fig or fig.get("median") is None:
        return f"| {name} | – | – | – | 0 | {unit} | {note} |"
    return (f"| {name} | {_fmt(fig['median'], unit)} | {_fmt(fig['min'], unit)} | "
            f"{_fmt(fig['max'], unit)} | {fig['n']} | {unit} | {note} |")


def _frac(value: float | None, ceiling: float | None) -> str:
    if not value or not ceiling:
        return ""
    return f"{value / ceiling * 100:.0f}% of ceiling"


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    m, v, s = meta["machine"], meta["versions"], meta["sizes"]
    lines = ["# millpond benchmark results", ""]
    lines += [
        f"Measured {meta['date']} with `{meta['command']}`"
        + (" (**--quick sizes: not representative**)" if meta.get("quick") else "") + ".",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu_model']}), {m['ram_gib']} GiB RAM, Linux "
        f"{m.get('kernel', '')}; load average at start {m.get('load_average_start')}, at end "
        f"{m.get('load_average_end')}; CPU steal during the run "
        f"{m.get('cpu_steal_percent', '?')}% (time the hypervisor gave other guests).",
        f"- Versions: Python {v.get('python')}, Apache Kafka {v.get('kafka_broker')} (local "
        f"KRaft broker, `millpond dev kafka`), librdkafka {v.get('librdkafka')} "
        f"(confluent-kafka {v.get('confluent_kafka')}), rocksdict {v.get('rocksdict')}, "
        f"millpond {v.get('millpond')}, quixstreams {v.get('quixstreams') or 'not installed'} "
        f"(confluent-kafka {v.get('quix_confluent_kafka')}), faust-streaming "
        f"{v.get('faust-streaming') or 'not installed'} (aiokafka {v.get('faust_aiokafka')}, "
        f"rocksdict {v.get('faust_rocksdict')}).",
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
        lines.append(_row("raw consume + json.loads", limits.get("consume_json_msgs_per_s"),
                          "msg/s", "for reference"))
    if raw:
        lines.append(_row("**Ceiling**: raw rocksdict put (100 B values)", raw.get("put_per_s"),
                          "ops/s", "from store_micro.py"))
        lines.append(_row("**Ceiling**: raw rocksdict get", raw.get("get_per_s"), "ops/s",
                          "from store_micro.py"))

    count = results.get("count") or {}
    order = ["millpond at-least-once", "millpond effectively-once", "millpond exactly-once",
             "quix at-least-once", "quix exactly-once",
             "millpond at-least-once (small topic)",
             "faust at-least-once (small topic)"]
    for key in order + [k for k in count if k not in order]:
        entry = count.get(key)
        if not entry:
            continue
        label = f"count: {key}"
        if entry.get("wrong"):
            lines.append(f"| {label} | **WRONG** | | | {entry['all_runs']} | msg/s | final "
                         f"counts differ from the reference |")
            continue
        if not entry.get("good_runs"):
            lines.append(f"| {label} | **FAILED** | | | {entry['all_runs']} | msg/s | "
                         f"see problems |")
            continue
        rate = entry.get("msgs_per_s")
        note = "first message → process end"
        if key.startswith("millpond") and consume and "small topic" not in key:
            note += f"; {_frac(_med(rate), consume)}"
        lines.append(_row(label, rate, "msg/s", note))
        lines.append(_row("  ↳ incl. start-up", entry.get("msgs_per_s_incl_startup"), "msg/s",
                          f"process start → end; start-up {_fmt(_med(entry.get('startup_s')))} s"))
        lines.append(_row("  ↳ CPU", entry.get("cpu_s_per_million"), "CPU s / 1M msgs",
                          f"whole child process (wait4); peak RSS "
                          f"{_fmt(_med(entry.get('maxrss_mb')))} MB"))

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
                          _frac(_med(mp.get("put_per_s")), _med(raw.get("put_per_s")))))
        lines.append(_row("store get (serialized + cached)", mp.get("get_per_s"), "ops/s",
                          _frac(_med(mp.get("get_per_s")), _med(raw.get("get_per_s")))))
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
    lines.append("")

    tg = results.get("targets") or []
    if tg:
        lines += ["| target | measured (median) | min – max | result |",
                  "| --- | ---: | ---: | --- |"]
        for t in tg:
            spread = (f"{_fmt(t['min'], t['unit'])} – {_fmt(t['max'], t['unit'])}"
                      if t.get("min") is not None else "")
            status = {"pass": "pass", "miss": "**miss**", "n/a": "n/a"}[t["status"]]
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
            + (f", `producer_linger_ms={linger}` (librdkafka's default linger, as millpond and "
               f"Quix have; Faust's default 0 sends every changelog record in its own request "
               f"and ran ~2x slower in a trial)" if linger is not None and linger >= 0 else "")
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
    if problems:
        lines += ["", "Problems (failed, WRONG or missing):", ""]
        lines += [f"- {p.splitlines()[0][:400]}" for p in problems]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Re-render results.md from a results.json (targets recomputed): report.py IN [OUT]."""
    import json
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    src = Path(args[0]) if args else Path(__file__).with_name("results.json")
    dst = Path(args[1]) if len(args) > 1 else src.with_suffix(".md")
    results = json.loads(src.read_text())
    results["targets"] = targets(results)
    src.write_text(json.dumps(results, indent=2, default=str) + "\n")
    dst.write_text(markdown(results))
    print(f"wrote {dst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ``dataflow`` workload: the count written with the streams API (``millpond.streams``)
beside the StreamTask count, the consume + JSON-decode ceiling, Bytewax and Quix Streams, all
on the benchmark input topic in interleaved rounds; and a two-stage dataflow (filter ->
key_by -> count -> to) beside the same dataflow without its repartition hop (filter -> count
-> to): the cost of the hop.

Each round measures the topic's ceilings first (consume; + JSON decode; + a count through the
store stack, and in a dict: benchmarks/bare_state.py), then (in an order that alternates between
rounds, so drifting load hits every system alike) millpond's StreamTask count and its dataflow
under effectively-once and exactly-once, the one- and two-stage dataflows (effectively-once),
Bytewax (recovery on), Quix Streams (at-least-once and exactly-once) and Pathway (static read,
persistence on), the peers in the first --peer-runs rounds. Every count is checked against the exact reference; the hop's two apps
count the records their filter keeps.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson

from benchmarks import data, jobs, report, systems
from benchmarks.common import load_average, summarize
from benchmarks.harness import Harness, say, say_run, summarize_runs
from benchmarks.workloads.count import _failed
from benchmarks.workloads.limits import ceiling, ceilings, state_ceiling

# The entries of results["dataflow"]["count"]: (key, system, guarantee, app).
STREAMTASK_EO = "millpond StreamTask effectively-once"
STREAMTASK_EOS = "millpond StreamTask exactly-once"
DATAFLOW_EO = "millpond dataflow effectively-once"
DATAFLOW_EOS = "millpond dataflow exactly-once"
ONE_STAGE = "millpond one-stage (filter, count, to) effectively-once"
TWO_STAGE = "millpond two-stage (filter, key_by, count, to) effectively-once"
BYTEWAX = "bytewax (recovery on)"
QUIX_ALO = "quix at-least-once"
QUIX_EOS = "quix exactly-once"
PATHWAY = report.PATHWAY_KEY
ORDER = [DATAFLOW_EO, STREAMTASK_EO, DATAFLOW_EOS, STREAMTASK_EOS, ONE_STAGE, TWO_STAGE,
         BYTEWAX, QUIX_ALO, QUIX_EOS, PATHWAY]


def _hop_references(h: Harness) -> dict[str, int]:
    """The per-user counts of the records the hop apps' filter keeps (both apps count
    those: the one-stage by the record key, the two-stage by the value's user_id, which
    is the same string)."""
    assert h.dataset is not None
    out: Counter[str] = Counter()
    loads, keep, user_of = orjson.loads, jobs.keep, jobs.user_of
    for _, value, _ in h.dataset.records:
        view = loads(value)
        if keep(view):
            out[user_of(view)] += 1
    return dict(out)


# --dataflow-runs picks millpond's entries by these names (default: all of them).
MILLPOND_RUNS = {"eo": (DATAFLOW_EO, "effectively-once", "count_app"),
                 "task-eo": (STREAMTASK_EO, "effectively-once", None),
                 "eos": (DATAFLOW_EOS, "exactly-once", "count_app"),
                 "task-eos": (STREAMTASK_EOS, "exactly-once", None),
                 "one-stage": (ONE_STAGE, "effectively-once", "one_stage_app"),
                 "two-stage": (TWO_STAGE, "effectively-once", "two_stage_app")}


def _plan(h: Harness) -> list[tuple[str, str, str, str | None]]:
    a = h.args
    plan: list[tuple[str, str, str, str | None]] = []
    if "millpond" in a.system_list:
        plan += [(key, "millpond", guarantee, app)
                 for name, (key, guarantee, app) in MILLPOND_RUNS.items()
                 if name in a.dataflow_runs]
    if "bytewax" in a.system_list and h.peer_ready("bytewax"):
        plan.append((BYTEWAX, "bytewax", "recovery on", None))
    if "quix" in a.system_list and h.peer_ready("quix"):
        plan += [(QUIX_ALO, "quix", "at-least-once", None),
                 (QUIX_EOS, "quix", "exactly-once", None)]
    if "pathway" in a.system_list and h.peer_ready("pathway"):
        plan.append((PATHWAY, "pathway", "static, persistence on", None))
    return plan


SENT_SHARE = 0.9  # the hop's rate runs to the time this share of the counts was sent


def _hop_run(h: Harness, r: int, key: str, guarantee: str, app: str | None,
             reference: dict[str, int]) -> dict[str, Any]:
    """One run of a hop app, writing to an output topic of its own. Besides the run's rate to
    its exit, ``msgs_per_s_to_90pct_sent``: SENT_SHARE of the input over first message -> the
    time SENT_SHARE of its counts had been sent (the output records' LogAppendTime), the rate
    without the bounded run's end (draining the internal topic, the last commits, close)."""
    a = h.args
    assert h.input_topic is not None
    tag = f"d{r}k{ORDER.index(key)}"
    output = f"millpond-bench-dfout-{h.salt}-{tag}"
    # LogAppendTime: the broker stamps each output record when it is appended. A dataflow's
    # to() sends a record with its input record's timestamp (CreateTime would be the input's
    # produce time, before the job started), so the topic's own clock is what says "sent".
    data.create_topic(a.bootstrap, output, a.partitions,
                      **{"message.timestamp.type": "LogAppendTime"})
    h.topics.append(output)
    try:
        res = systems.millpond_count(h.ctx, h.input_topic, a.messages, guarantee, tag,
                                     reference, app=app, output=output)
        sent = data.timestamps(a.bootstrap, output) if res.get("ok") else []
    finally:
        data.delete_topics(a.bootstrap, [output])  # 1.7M records a run: not kept
    first = res.get("first_message_at")
    if sent and first is not None:
        res["outputs"] = len(sent)
        at = sent[min(len(sent) - 1, int(SENT_SHARE * len(sent)))]
        if at > first:
            res["sent_90pct_s"] = at - first
            res["msgs_per_s_to_90pct_sent"] = SENT_SHARE * a.messages / (at - first)
        res["last_output_s"] = sent[-1] - first
        res["end_after_last_output_s"] = res["exited_at"] - sent[-1]
    return res


def _bare_hop(h: Harness, topic: str, messages: int) -> dict[str, Any]:
    """The one- and two-stage apps as bare confluent-kafka loops (no transactions, no
    commits, no runtime): their rates and the hop's cost between them."""
    from benchmarks.bare_hop import pair

    out = pair(h.args.bootstrap, topic, messages)
    for name in ("one-stage", "two-stage"):
        res = out[name]
        if not res["complete"]:
            h.problem(f"the bare {name} loop counted {res['counted']} and sent "
                      f"{res['outputs']} of {res['kept']} kept records")
    say(f"bare hop loops: one-stage {out['one-stage']['msgs_per_s']:,.0f} msg/s, two-stage "
        f"{out['two-stage']['msgs_per_s']:,.0f} msg/s, hop cost {out['hop_cost']:.0%}")
    return out


def dataflow(h: Harness) -> None:
    h.ensure_input()
    assert h.input_topic is not None
    a, ctx = h.args, h.ctx
    topic, messages = h.input_topic, a.messages
    plan = _plan(h)
    hop = [key for key, *_ in plan if key in (ONE_STAGE, TWO_STAGE)]
    hop_reference = _hop_references(h) if hop else {}
    h.results["dataflow"] = {
        "input": {"topic": topic, "messages": messages, "users": a.users},
        "hop": {"filter": "benchmarks.jobs.keep (page != '/help')",
                "new_key": "benchmarks.jobs.user_of (the value's user_id)",
                "kept_messages": sum(hop_reference.values())},
    }
    consume: list[dict[str, Any]] = []
    consume_json: list[dict[str, Any]] = []
    # The same decode plus a count through the store stack (or a dict) and nothing else of
    # the runtime: how far the count's share of the decode ceiling can go (issue #29).
    stack: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    bare_hops: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(a.runs):
        consume.append(ceiling(h, topic))
        consume_json.append(ceiling(h, topic, decode_json=True))
        stack.append(state_ceiling(h, topic))
        plain.append(state_ceiling(h, topic, plain_dict=True))
        if hop:  # the hop's floor: both apps as bare loops (benchmarks/bare_hop.py)
            bare_hops.append(_bare_hop(h, topic, messages))
        say(f"dataflow ceilings run {r + 1}: consume {consume[-1]['msgs_per_s']:,.0f} msg/s, "
            f"consume+orjson {consume_json[-1]['msgs_per_s']:,.0f} msg/s, + a count in the "
            f"store stack {stack[-1]['msgs_per_s']:,.0f} msg/s, in a dict "
            f"{plain[-1]['msgs_per_s']:,.0f} msg/s")
        # Odd rounds go through the plan backwards: each system's neighbours change.
        for key, system, guarantee, app in (plan if r % 2 == 0 else plan[::-1]):
            if system != "millpond" and r >= a.peer_runs:
                continue
            say(f"dataflow run {r + 1}/{a.runs}: {key} on {messages:,} msgs "
                f"(load {load_average()})")
            try:
                if system == "millpond" and key in (ONE_STAGE, TWO_STAGE):
                    res = _hop_run(h, r, key, guarantee, app, hop_reference)
                elif system == "millpond":
                    res = systems.millpond_count(ctx, topic, messages, guarantee,
                                                 f"d{r}k{ORDER.index(key)}", ctx.reference,
                                                 app=app)
                elif system == "bytewax":
                    res = systems.bytewax_count(ctx, topic, messages, f"d{r}", ctx.reference)
                elif system == "pathway":
                    res = systems.pathway_count(ctx, topic, messages, f"d{r}", ctx.reference)
                else:
                    res = systems.quix_count(ctx, topic, messages, guarantee, f"d{r}",
                                             ctx.reference)
            except Exception as exc:
                res = _failed(system, guarantee, exc)
            say_run(key, res)
            runs.setdefault(key, []).append(res)
    h.results["dataflow"].update({
        "limits": {**ceilings(h, consume, consume_json, messages),
                   "state_stack_msgs_per_s": summarize([x["msgs_per_s"] for x in stack]),
                   "state_dict_msgs_per_s": summarize([x["msgs_per_s"] for x in plain]),
                   "runs": {"consume": consume, "consume_json": consume_json,
                            "state_stack": stack, "state_dict": plain,
                            "bare_hop": bare_hops}},
        "count": {key: summarize_runs(rs) for key, rs in runs.items()},
    })
    h.report_bad_runs("dataflow", runs)

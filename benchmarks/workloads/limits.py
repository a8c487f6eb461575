"""The ``limits`` workload: the raw client ceilings on the benchmark input (confluent-kafka
produce and consume, and consume + orjson decode), and the ceilings of any topic."""

from __future__ import annotations

import time
from typing import Any

from benchmarks import data
from benchmarks.common import Conditions, summarize
from benchmarks.harness import Harness, say


def limits(h: Harness) -> None:
    h.ensure_input()
    assert h.dataset is not None and h.input_topic is not None
    a = h.args
    produce, consume, consume_json = [], [], []
    for r in range(a.runs):
        scratch = f"millpond-bench-produce-{h.salt}-{r}"
        data.create_topic(a.bootstrap, scratch, a.partitions)
        try:
            with Conditions() as cond:
                rate = data.produce(a.bootstrap, scratch, h.dataset)
            produce.append({**rate, **cond.fields()})
        finally:
            data.delete_topics(a.bootstrap, [scratch])
        consume.append(ceiling(h, h.input_topic))
        consume_json.append(ceiling(h, h.input_topic, decode_json=True))
        say(f"limits run {r + 1}: produce {produce[-1]['msgs_per_s']:,.0f} msg/s, consume "
            f"{consume[-1]['msgs_per_s']:,.0f} msg/s, consume+json "
            f"{consume_json[-1]['msgs_per_s']:,.0f} msg/s")
    h.results["limits"] = {
        "produce_msgs_per_s": summarize([x["msgs_per_s"] for x in produce]),
        "produce_mb_per_s": summarize([x["mb_per_s"] for x in produce]),
        **ceilings(h, consume, consume_json, a.messages),
        "runs": {"produce": produce, "consume": consume, "consume_json": consume_json},
    }


def ceiling(h: Harness, topic: str, decode_json: bool = False) -> dict[str, Any]:
    """One raw consume of ``topic`` (with orjson decode when asked), with its conditions."""
    began = time.process_time()
    with Conditions() as cond:
        out = data.consume_all(h.args.bootstrap, topic, decode_json=decode_json)
    # This process's CPU (librdkafka's threads included) while it read: the harness does
    # nothing else meanwhile.
    return {**out, **cond.fields(), "cpu_s": time.process_time() - began}


def state_ceiling(h: Harness, topic: str, plain_dict: bool = False) -> dict[str, Any]:
    """One bare consume + decode + count of ``topic`` through millpond's store stack (or a
    dict), nothing else of the runtime (benchmarks/bare_state.py), with its conditions."""
    from benchmarks.bare_state import count_through_stores

    began = time.process_time()
    with Conditions() as cond:
        out = count_through_stores(h.args.bootstrap, topic, plain_dict=plain_dict)
    if out["counted"] != out["records"]:
        h.problem(f"the bare state loop counted {out['counted']} of {out['records']} records")
    return {**out, **cond.fields(), "cpu_s": time.process_time() - began}


def ceilings(h: Harness, consume: list[dict[str, Any]], consume_json: list[dict[str, Any]],
             messages: int) -> dict[str, Any]:
    for r in consume + consume_json:
        if r["records"] != messages:
            h.problem(f"raw consume read {r['records']} records, not {messages}")
    import orjson

    return {"consume_msgs_per_s": summarize([x["msgs_per_s"] for x in consume]),
            "consume_mb_per_s": summarize([x["mb_per_s"] for x in consume]),
            "consume_json_msgs_per_s": summarize([x["msgs_per_s"] for x in consume_json]),
            "json_decoder": f"orjson {orjson.__version__} (millpond's json serde)"}

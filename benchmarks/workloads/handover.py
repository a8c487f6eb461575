"""The ``handover`` workload (issue #39): what a scale-out and a scale-in cost the tasks.

The latency workload's keyed count (``benchmarks.jobs.LatencyCounter``, at-least-once,
commit 1 s, --partitions tasks) runs in one process, its input paced at the first of
--latency-rates. Once it is warm (WARM_S) a second process of the same job starts
(scale-out: the cooperative-sticky assignor moves some tasks to it); HOLD_S later that
process is stopped with SIGTERM (scale-in: its tasks come back); AFTER_S more, the input
ends. The reader notes when it saw each output; a message's input partition follows from
its seq. For each phase, over the WINDOW_S seconds after the second process was started
(out) or signalled (back):

- the tasks that stayed: the worst latency of their messages, against the steady p99
  before the scale-out: the processing gap a rebalance costs a task that does not move
  (target <= 100 ms);
- the tasks that moved: the worst latency of their messages, i.e. how long they stood still
  while their new owner took them over;
- beside them, the worst latency of all messages in the steady seconds before the
  scale-out (from 2 s after the paced input began): what commits and the machine cost
  with no rebalance, the baseline of the stayed tasks' figure.

Which tasks moved is read from the second process's log ("assigned partitions [...]"). Every
input must come out at least once. With ``--keep``, ``<work-dir>/h0-samples.csv`` has every
output's seq, input partition, input ``ts_ms``, Kafka timestamp (when the job produced it)
and when the reader saw it.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

from benchmarks.common import MILLPOND, Child, start_child
from benchmarks.harness import Harness, say
from benchmarks.workloads import latency
from benchmarks.workloads.latency import Feed, MillpondJob, OutputReader, Row, percentiles

WARM_S = 6.0  # paced input before the second process starts
HOLD_S = 12.0  # the second process runs this long
AFTER_S = 8.0  # paced input after it was signalled to stop
WINDOW_S = 6.0  # each phase's figures: messages produced this long after its event
ASSIGNED = re.compile(r"assigned partitions \[([0-9, ]*)\]")


def moved_partitions(log: str) -> list[int]:
    """The partitions the second process was first assigned (its log's first
    "assigned partitions [...]" line with any)."""
    for match in ASSIGNED.finditer(log):
        parts = [int(p) for p in match.group(1).replace(" ", "").split(",") if p]
        if parts:
            return sorted(parts)
    return []


def phase_figures(records: list[tuple[int, float, float]], partition_of: dict[int, int],
                  moved: list[int], began_ms: float, window_ms: float) -> dict[str, Any]:
    """The worst latency of the messages produced in ``[began_ms, began_ms + window_ms)``,
    for the partitions in ``moved`` and the others (first sighting of each seq)."""
    worst: dict[str, float] = {"stayed": 0.0, "moved": 0.0}
    counted = {"stayed": 0, "moved": 0}
    seen: set[int] = set()
    for seq, ts, at in records:
        if seq in seen or not began_ms <= ts < began_ms + window_ms:
            continue
        seen.add(seq)
        side = "moved" if partition_of[seq] in moved else "stayed"
        worst[side] = max(worst[side], at - ts)
        counted[side] += 1
    return {"stayed_max_ms": worst["stayed"], "moved_max_ms": worst["moved"],
            "stayed_messages": counted["stayed"], "moved_messages": counted["moved"]}


def measure(h: Harness, rate: int, tag: str) -> dict[str, Any]:
    a = h.args
    row = Row("millpond", "at-least-once", 1000, rate)
    topic, output = latency._topics(h, tag)
    res: dict[str, Any] = {"rate": rate, "partitions": a.partitions, "users": a.latency_users,
                           "window_s": WINDOW_S}
    reader = OutputReader(a.bootstrap, output, a.partitions, row.isolation)
    reader.start()
    feed = Feed(a.bootstrap, topic, a.latency_users, a.partitions)
    first = MillpondJob(h, row, topic, output, tag)
    second = None
    second_child: Child | None = None
    try:
        res["startup_s"] = feed.probe_until(
            lambda: reader.first_seen.is_set() or not first.alive(), latency.START_TIMEOUT_S)
        paced: dict[str, Any] = {}
        pacer = threading.Thread(target=lambda: paced.update(
            feed.paced(rate, WARM_S + HOLD_S + AFTER_S)), daemon=True)
        began = time.time() * 1000
        pacer.start()
        time.sleep(WARM_S)
        out_ms = time.time() * 1000
        level = os.environ.get("MILLPOND_BENCH_JOB_LOG_LEVEL", "INFO")  # as the first's
        second = start_child([MILLPOND, "run", "--config", str(first.config),
                              "--log-level", level], logdir=first.config.parent, name="second")
        time.sleep(HOLD_S)
        back_ms = time.time() * 1000
        second_child = second.stop(grace=60)
        pacer.join(timeout=AFTER_S + 120)
        res["drain"] = reader.drain(feed.next_seq, False, latency.DRAIN_S + 3)
    finally:
        if second is not None and second_child is None:
            second_child = second.stop(grace=60)
        res["first"] = first.stop()
        reader.stop()
    moved = moved_partitions(second_child.stderr if second_child else "")
    partition_of = {seq: latency.input_record(seq, a.latency_users, a.partitions)[1]
                    for seq in range(feed.next_seq)}
    if a.keep:  # every output's times and partition, to see when the slow ones were held
        with open(h.work / f"{tag}-samples.csv", "w") as f:
            f.write(f"# scale-out at {out_ms:.0f}, scale-in at {back_ms:.0f}, moved {moved}\n"
                    "seq,partition,ts_ms,out_ms,seen_ms\n")
            f.writelines(f"{seq},{partition_of.get(seq)},{ts:.3f},{produced},{seen:.3f}\n"
                         for (seq, ts, seen), produced in zip(reader.records,
                                                              reader.produced_ms, strict=True))
    steady = [at - ts for seq, ts, at in reader.records
              if began + 2000 <= ts < out_ms]
    res.update({"moved": moved, "second_returncode": second_child.returncode
                if second_child else None,
                "steady": percentiles(steady), "steady_window_s": (out_ms - began - 2000) / 1000,
                "out": phase_figures(reader.records, partition_of, moved, out_ms,
                                     WINDOW_S * 1000),
                "back": phase_figures(reader.records, partition_of, moved, back_ms,
                                      WINDOW_S * 1000),
                "produced": feed.next_seq, "missing": res["drain"]["missing"],
                "achieved_rate": paced.get("achieved_rate")})
    res["ok"] = bool(moved) and not res["missing"] and res["second_returncode"] == 0
    if not res["ok"]:
        res["error"] = (f"moved {moved}, {res['missing']} missing, second process exit "
                        f"{res['second_returncode']}")
    return res


def handover(h: Harness) -> None:
    rate = h.args.latency_rate_list[0]
    say(f"handover: one process, then two, then one, at {rate:,} msg/s")
    try:
        res = measure(h, rate, "h0")
    except Exception as exc:
        res = {"ok": False, "error": repr(exc), "rate": rate}
    if res.get("ok"):
        st = res["steady"]
        say(f"  steady p50 {st['p50']:.1f} / p99 {st['p99']:.1f} / max {st['max']:.0f} ms; "
            f"moved {res['moved']}; "
            f"scale-out: stayed max {res['out']['stayed_max_ms']:.0f} ms, moved max "
            f"{res['out']['moved_max_ms']:.0f} ms; scale-in: stayed max "
            f"{res['back']['stayed_max_ms']:.0f} ms, moved max "
            f"{res['back']['moved_max_ms']:.0f} ms")
    else:
        say(f"  handover FAILED: {res.get('error')}")
    h.results["handover"] = res

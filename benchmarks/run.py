"""`make bench`: millpond against raw client ceilings and against Quix Streams, Faust, Bytewax
and Pathway.

    .venv/bin/python -m benchmarks.run [--quick] [--runs N] [--only WORKLOAD] [--bootstrap B]

Workloads (``--only``, comma-separated or repeated): ``limits`` (raw confluent-kafka produce
and consume on the benchmark input, and consume + orjson decode; raw rocksdict comes from the
store micro-benchmark), ``count`` (per-user count into a changelogged RocksDB store: millpond
at each guarantee, Quix Streams, Pathway 0.33 (kafka.read in static mode -> groupby(user_id)
.reduce(count) -> jsonlines, persistence on; benchmarks/peers/pathway_count.py), Faust; and
millpond effectively-once once more per round with the record undo journal on
(``task.dlq.stream`` set, nothing dead-lettered: the journal's CPU cost per message), once
more serving 1,000 gets/s of its store from a driver process (``job.query.address`` set, issue
#33: the queries' throughput cost) and once more with the Prometheus reporter on and scraped
every second: the reporter's cost), ``dataflow``
(the count written with the streams API beside the StreamTask count, the consume + decode
ceiling, Bytewax 0.21 and Quix Streams; and filter -> key_by -> count -> to beside filter ->
count -> to: the repartition hop's cost), ``windows`` (a 1-minute tumbling count per user
with final results by the value's event time: millpond's dataflow, Quix Streams and Bytewax
0.21, each checked against the exact windows of the data, beside millpond's plain dataflow
count of the same topic; benchmarks/workloads/windows.py), ``sessions`` (a session-window
count per user, 30-minute gap, beside the 1-minute tumbling count on one topic of --messages
over --rss-users users: peak RSS, sessions <= 1.5x tumbling; benchmarks/workloads/sessions.py),
``skew`` (the same count on a Zipf-keyed topic, 2M
messages over 1M users with exponent 1.1: hot keys and a long tail; millpond and Quix Streams,
with that topic's own consume and consume + decode ceilings), ``rss`` (peak RSS of the
millpond count with defaults on a uniform topic over 1M users), ``restore`` (rebuild the
count's state from its changelog: `millpond restore --full` and Quix Streams recovery),
``snapshot-restore`` (benchmarks/snapshot_restore.py: a 4M-record store partition restored
from an S3Proxy snapshot + changelog tail vs full changelog replay),
``store`` (benchmarks/store_micro.py and the hot-key benchmarks/store_hot.py), ``spark``
(benchmarks/spark_rebuild.py, and benchmarks/spark_bootstrap.py: bootstrap a store from 2M
Parquet rows) and ``memory-cap`` (benchmarks/memory_cap.py: a read-then-write job of 1.6M
keys x 1 KB inside a 384 MB cgroup with ``job.container.memory.mb=384``, one task and one
store, then 4 tasks x 2 stores: build, restart, restore, each phase's peak RSS against the
budget) and ``latency`` (benchmarks/workloads/latency.py: end-to-end latency of a keyed
count that sends an output per input, the input produced at fixed rates (--latency-rates,
default 5,000 and 20,000 msg/s) for --latency-seconds; p50 / p99 / p99.9 / max at each
guarantee with task.commit.ms 1000 and exactly-once at 100, every input checked to come
out) and ``handover`` (benchmarks/workloads/handover.py: the latency workload's count in one
process, then a second one started and stopped; the worst latency of the tasks that stayed
and of the ones that moved). Every figure is the median of the runs with min
and max; every count and restore is checked against the exact reference; every run records
the load average before it and the CPU steal during it.
Writes ``results.json``, ``results.md`` and ``readme-table.md`` (docs/benchmarks.md's table,
ready to paste) into ``--out-dir`` (default: benchmarks/).

This module parses the arguments and runs the selected workloads in order; each workload
family lives in ``benchmarks/workloads/`` (limits, count, restore, store, spark, memory,
latency) as functions
of the shared ``benchmarks.harness.Harness``; ``benchmarks/meta.py`` writes the run summary.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import meta, report
from benchmarks.common import REPO, Conditions, load_average
from benchmarks.harness import Harness, say
from benchmarks.workloads import (
    count,
    dataflow,
    handover,
    joins,
    latency,
    limits,
    memory,
    restore,
    sessions,
    spark,
    store,
    windows,
)

# Every workload, in the order a run goes through them (``--only`` picks some).
STEPS: dict[str, Callable[[Harness], None]] = {
    "limits": limits.limits, "count": count.count, "dataflow": dataflow.dataflow,
    "windows": windows.windows, "sessions": sessions.sessions, "joins": joins.joins,
    "skew": count.skew, "rss": count.rss,
    "restore": restore.restore, "snapshot-restore": restore.snapshot_restore,
    "store": store.store, "spark": spark.spark, "memory-cap": memory.memory_cap,
    "latency": latency.latency, "handover": handover.handover}
WORKLOADS = tuple(STEPS)
# millpond-dataflow: the latency workload's dataflow count (the other workloads run
# millpond's dataflows under "millpond").
ALL_SYSTEMS = ("millpond", "millpond-dataflow", "quix", "faust", "bytewax", "pathway")

FULL = {"messages": 2_000_000, "users": 100_000, "faust_messages": 30_000,
        "store_ops": 1_000_000, "hot_ops": 2_000_000, "spark_records": 500_000, "spark_large_records": 2_000_000,
        "spark_bootstrap_records": 2_000_000, "large_records": 200_000, "restore_sizes": "2000000,4000000,8000000",
        "skew_messages": 2_000_000, "skew_users": 1_000_000, "rss_messages": 2_000_000,
        "rss_users": 1_000_000, "snapshot_records": 4_000_000, "memcap_keys": 1_600_000,
        "latency_rates": "5000,20000", "latency_seconds": 30.0, "latency_runs": 3,
        "join_table_rows": 1_000_000, "query_phase_s": 0.5}
QUICK = {"messages": 20_000, "users": 2_000, "faust_messages": 5_000, "store_ops": 20_000,
         "hot_ops": 20_000, "spark_records": 20_000, "spark_large_records": 2_000, "spark_bootstrap_records": 20_000,
         "large_records": 5_000,
         "restore_sizes": "5000,20000", "skew_messages": 20_000, "skew_users": 10_000,
         "rss_messages": 20_000, "rss_users": 10_000, "snapshot_records": 20_000,
         "memcap_keys": 20_000, "latency_rates": "500", "latency_seconds": 3.0,
         "latency_runs": 1, "join_table_rows": 2_000, "query_phase_s": 0.02}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    p.add_argument("--runs", type=int, default=3, help="runs of each figure (default 3)")
    p.add_argument("--only", action="append", default=[], metavar="WORKLOAD",
                   help=f"run only these workloads ({', '.join(WORKLOADS)}); repeatable")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                   help="systems to count with (default: millpond,millpond-dataflow,quix,"
                        "faust,bytewax,pathway; pathway runs in the count and latency "
                        "workloads, millpond-dataflow in the latency workload)")
    p.add_argument("--dataflow-runs", default="eo,task-eo,eos,task-eos,one-stage,two-stage",
                   help="millpond's counts in the dataflow workload (default all: the dataflow "
                        "and the StreamTask count at effectively-once and exactly-once, and "
                        "the one- and two-stage apps of the hop)")
    p.add_argument("--bytewax-wait-s", type=float, default=120.0,
                   help="Bytewax's wait_for_system_duration in the windows workload (default "
                        "120: a key's next record, 100k messages later, is not late on a "
                        "loaded machine; 0 is ~3x faster at 10k users, but at 100k users "
                        "Bytewax reads ~1k msg/s and a key's next record comes later on the "
                        "wall clock than in event time)")
    p.add_argument("--messages", type=int, help="input messages (default 2M; --quick 20k)")
    p.add_argument("--users", type=int, help="distinct user ids (default 100k; --quick 2k)")
    p.add_argument("--partitions", type=int, default=4, help="input partitions (default 4)")
    p.add_argument("--peer-runs", type=int,
                   help="runs of each Quix Streams and Pathway count (default: --runs; Quix "
                        "~3 min each at 2M)")
    p.add_argument("--faust-messages", type=int,
                   help="Faust counts a scaled-down topic of this many messages (same generator "
                        "and messages per user; default 30k: it runs at ~1k msg/s); millpond "
                        "counts it too for the ratio")
    p.add_argument("--faust-runs", type=int, help="runs of Faust (default: --runs)")
    p.add_argument("--faust-linger-ms", type=int, default=5,
                   help="Faust producer_linger_ms (default 5, librdkafka's default that millpond "
                        "and Quix use; Faust's own 0 sends each changelog record alone; -1: "
                        "leave Faust's default)")
    p.add_argument("--commit-ms", type=int, default=5000,
                   help="commit interval of every system (default 5000, Quix's default)")
    p.add_argument("--skew-messages", type=int,
                   help="messages of the skewed (Zipf) topic (default 2M; --quick 20k)")
    p.add_argument("--skew-users", type=int,
                   help="Zipf ranks (possible users) of the skewed topic (default 1M; --quick 10k)")
    p.add_argument("--skew-exponent", type=float, default=1.1,
                   help="Zipf exponent of the skewed topic's keys (default 1.1)")
    p.add_argument("--seed", type=int, default=14,
                   help="seed of the skewed topic's key draw (default 14; same seed, same keys)")
    p.add_argument("--rss-messages", type=int,
                   help="messages of the uniform 1M-user topic of the rss workload (default 2M; "
                        "--quick 20k)")
    p.add_argument("--rss-users", type=int,
                   help="users of the rss workload's topic (default 1M; --quick 10k)")
    p.add_argument("--sessions-memory-mb", type=int, default=256,
                   help="the sessions workload runs both jobs once more a round with this "
                        "job.container.memory.mb (default 256; 0: only at the default budget)")
    p.add_argument("--join-table-rows", type=int,
                   help="rows of the joins workload's table, one per user of its page views "
                        "(default 1M; --quick 2k)")
    p.add_argument("--store-ops", type=int, help="store micro-benchmark keys (default 1M)")
    p.add_argument("--hot-ops", type=int,
                   help="puts and gets of the one hot key in store_hot.py (default 2M)")
    p.add_argument("--large-records", type=int,
                   help="records of the synthetic 1 KB-value changelog restored for the MB/s "
                        "figure (default 200k; --quick 5k; 0 = skip)")
    p.add_argument("--restore-sizes",
                   help="changelog sizes (records, comma-separated) whose restores' peak RSS is "
                        "compared (default 2M,4M,8M; --quick 5k,20k; empty = skip)")
    p.add_argument("--backup-interval-ms", type=int, default=60000,
                   help="job.state.backup.interval.ms of the count with backups on (default "
                        "60000, the library's: each partition uploads its first commit's "
                        "snapshot, then one a minute; 5000 uploads at every commit); "
                        "-1: no backups-on row")
    p.add_argument("--query-rate", type=float, default=1000.0,
                   help="gets/s of the count's store by the query driver of the count "
                        "workload's queries-on run (default 1000, issue #33; its own process, "
                        "keep-alive connections, random users, mostly routed); 0: no "
                        "queries-on run")
    p.add_argument("--query-phase-s", type=float,
                   help="the phases of the count's second queries run: the driver on for this "
                        "long, off as long, and so on, so one run has the job's rate with and "
                        "without queries (default 0.5; --quick 0.02)")
    p.add_argument("--query-connections", type=int, default=128,
                   help="the query driver's keep-alive connections (default 128: an answer "
                        "waits for the run loop's next iteration, ~100 ms on a loaded machine, "
                        "so 1,000/s needs ~100 in flight; each is a thread in the job)")
    p.add_argument("--snapshot-records", type=int,
                   help="records of the store partition of the snapshot-restore workload "
                        "(default 4M; --quick 20k)")
    p.add_argument("--snapshot-tail-percent", type=float, default=2.0,
                   help="records written after the snapshot, in %% of --snapshot-records "
                        "(default 2)")
    p.add_argument("--spark-records", type=int,
                   help="changelog records of the Spark rebuild (default 500k; --quick 20k; "
                        "0 = skip)")
    p.add_argument("--spark-large-records", type=int,
                   help="1 KB-value changelog records of the Spark rebuild + audit at Spark's "
                        "defaults (default 2M: a 2 GB changelog; --quick 2k; 0 = skip)")
    p.add_argument("--spark-bootstrap-records", type=int,
                   help="Parquet rows of the Spark bootstrap (default 2M; --quick 20k; 0 = skip)")
    p.add_argument("--spark-runs", type=int, help="runs of the Spark rebuild (default: --runs)")
    p.add_argument("--memcap-keys", type=int,
                   help="keys (1 KB values) of the memory-cap workload, over all tasks "
                        "(default 1.6M: issue #36's acceptance; --quick 20k)")
    p.add_argument("--memcap-mb", type=int, default=384,
                   help="the memory-cap workload's cgroup and job.container.memory.mb "
                        "(default 384)")
    p.add_argument("--memcap-layouts", default="1x1,4x2",
                   help="tasks x stores per task of the memory-cap runs, comma-separated "
                        "(default 1x1,4x2: one task and one store; 4 tasks and 2 stores each)")
    p.add_argument("--latency-rates",
                   help="input rates (msg/s, comma-separated) of the latency workload "
                        "(default 5000,20000; --quick 500)")
    p.add_argument("--latency-seconds", type=float,
                   help="seconds each latency run measures, after its warm-up (default 30; "
                        "--quick 3)")
    p.add_argument("--latency-warmup-s", type=float, default=2.0,
                   help="seconds of paced input after the job's first output that the "
                        "latency figures leave out (default 2)")
    p.add_argument("--latency-users", type=int, default=10_000,
                   help="distinct users of the latency workload's input (default 10k)")
    p.add_argument("--latency-rows", default="alo,eo,eos,eos-100",
                   help="the latency rows to run (default all: at-least-once, "
                        "effectively-once and exactly-once at task.commit.ms 1000, and "
                        "exactly-once at 100)")
    p.add_argument("--latency-runs", type=int,
                   help="runs of each latency row, reported as medians (default 3, --quick "
                        "1): a 30 s window on a shared machine can catch a burst of host "
                        "contention that stalls every process (steal reads 0.0%%; the CPU "
                        "pressure column shows it); rounds alternate their order")
    p.add_argument("--out-dir", type=Path, default=REPO / "benchmarks",
                   help="where results.json, results.md and readme-table.md go (default "
                        "benchmarks/)")
    p.add_argument("--work-dir", type=Path, help="scratch dir for state and logs (default: temp)")
    p.add_argument("--keep", action="store_true", help="keep topics and scratch state")
    p.add_argument("--no-install", action="store_true",
                   help="do not create missing peer virtualenvs (pip install from PyPI)")
    args = p.parse_args(argv)
    only = [w.strip() for item in args.only for w in item.split(",") if w.strip()]
    unknown = [w for w in only if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    args.workloads = only or list(WORKLOADS)
    args.system_list = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.dataflow_runs = [s.strip() for s in args.dataflow_runs.split(",") if s.strip()]
    from benchmarks.workloads.dataflow import MILLPOND_RUNS

    bad_runs = [s for s in args.dataflow_runs if s not in MILLPOND_RUNS]
    if bad_runs:
        p.error(f"unknown --dataflow-runs {bad_runs}; choose from {', '.join(MILLPOND_RUNS)}")
    from benchmarks.workloads.latency import ROWS

    args.latency_row_list = [s.strip() for s in args.latency_rows.split(",") if s.strip()]
    bad_rows = [s for s in args.latency_row_list if s not in ROWS]
    if bad_rows:
        p.error(f"unknown --latency-rows {bad_rows}; choose from {', '.join(ROWS)}")
    bad = [s for s in args.system_list if s not in ALL_SYSTEMS]
    if bad:
        p.error(f"unknown system(s) {bad}; choose from {', '.join(ALL_SYSTEMS)}")
    try:
        args.memcap_layouts = [tuple(int(n) for n in item.strip().split("x", 1))
                               for item in args.memcap_layouts.split(",") if item.strip()]
    except ValueError:
        p.error(f"--memcap-layouts: TASKSxSTORES, comma-separated, not {args.memcap_layouts!r}")
    if any(len(lay) != 2 or lay[0] < 1 or lay[1] not in (1, 2) for lay in args.memcap_layouts):
        p.error("--memcap-layouts: tasks >= 1 and 1 or 2 stores, e.g. 1x1,4x2")
    sizes = QUICK if args.quick else FULL
    for key, value in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    try:
        args.latency_rate_list = [int(r) for r in args.latency_rates.split(",") if r.strip()]
    except ValueError:
        p.error(f"--latency-rates: msg/s, comma-separated, not {args.latency_rates!r}")
    if any(r < 1 for r in args.latency_rate_list) or args.latency_seconds <= 0:
        p.error("--latency-rates and --latency-seconds must be positive")
    if args.peer_runs is None:
        args.peer_runs = args.runs
    args.faust_runs = args.faust_runs if args.faust_runs is not None else args.runs
    args.spark_runs = args.spark_runs if args.spark_runs is not None else args.runs
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def run(h: Harness) -> dict[str, Any]:
    """The selected workloads in order, each with its time and conditions; then the run summary
    and the clean-up, even when one of them crashed."""
    a = h.args
    say(f"workloads {a.workloads}, systems {a.system_list}, runs {a.runs}, "
        f"work dir {h.work}")
    try:
        for w in WORKLOADS:
            if w in a.workloads:
                began = time.time()
                with Conditions() as cond:
                    try:
                        STEPS[w](h)
                    except Exception as exc:
                        h.problem(f"workload {w} crashed: {exc!r}\n"
                                  f"{traceback.format_exc()[-2000:]}")
                seconds = round(time.time() - began, 1)
                h.results.setdefault("workload_seconds", {})[w] = seconds
                h.results["workload_conditions"][w] = {
                    "seconds": seconds, **cond.fields(),
                    "load_average_after": load_average()}
    finally:
        meta.finish(h.results, h.began)
        h.close()
    return h.results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = run(Harness(args))
    paths = report.write_all(results, args.out_dir)
    print(paths[1].read_text())
    say("wrote " + ", ".join(str(p) for p in paths) + f"; paste {paths[2].name} into the "
        "table of docs/benchmarks.md")
    return 1 if any("WRONG" in p for p in results["problems"]) else 0


if __name__ == "__main__":
    sys.exit(main())

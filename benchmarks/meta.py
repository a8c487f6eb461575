"""The run summary of `make bench` (``results["meta"]``): the command, the machine, the sizes,
the versions of millpond, its clients, the broker and the peers, and how the machine behaved
(load average, CPU steal) over the run; and the empty results dict the workloads fill in."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import systems
from benchmarks.common import (
    cpu_model,
    cpu_ticks,
    load_average,
    pip_version,
    ram_gib,
    steal_percent,
    venv_python,
)


def start_results(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The results of a run about to start: its summary so far, and every workload's slot."""
    return {
        "meta": {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                 "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.run",
                                      *sys.argv[1:]]),
                 "machine": machine(), "versions": versions(),
                 "sizes": {"messages": args.messages, "users": args.users,
                           "partitions": args.partitions,
                           "faust_messages": args.faust_messages,
                           "store_ops": args.store_ops, "hot_ops": args.hot_ops,
                           "large_records": args.large_records,
                           "skew_messages": args.skew_messages,
                           "skew_users": args.skew_users,
                           "skew_exponent": args.skew_exponent, "seed": args.seed,
                           "rss_messages": args.rss_messages, "rss_users": args.rss_users,
                           "snapshot_records": args.snapshot_records,
                           "latency_rates": args.latency_rate_list,
                           "latency_seconds": args.latency_seconds,
                           "latency_users": args.latency_users},
                 "runs": args.runs, "peer_runs": args.peer_runs,
                 "faust_runs": args.faust_runs, "commit_ms": args.commit_ms,
                 "faust_linger_ms": args.faust_linger_ms, "spark_runs": args.spark_runs,
                 "dataflow_runs": args.dataflow_runs,
                 "workloads": args.workloads, "systems": args.system_list,
                 "quick": args.quick, "work_dir": str(work)},
        "limits": {}, "count": {}, "dataflow": {}, "skew": {}, "rss": {}, "restore": {},
        "store_micro": None, "store_hot": None, "spark_rebuild": None,
        "spark_bootstrap": None, "snapshot_restore": None,
        "workload_conditions": {}, "problems": [],
    }


def finish(results: dict[str, Any], began: float) -> None:
    """The summary's end: the machine's load and CPU steal over the run, its length, and the
    versions that ran."""
    summary = results["meta"]
    box = summary["machine"]
    box["load_average_end"] = load_average()
    box["cpu_steal_percent"] = steal_percent(box.pop("cpu_ticks_start"), cpu_ticks())
    summary["seconds"] = round(time.time() - began, 1)
    # Now, not at start: a fresh machine creates the peers' virtualenvs mid-run.
    summary["versions"] = versions()
    summary["peer_versions"] = peer_versions(results)


def peer_versions(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The versions each peer reported from inside its runs (what actually ran)."""
    out: dict[str, dict[str, Any]] = {}
    r = results
    entries = [*r["count"].values(), *(r.get("skew") or {}).get("count", {}).values(),
               *r["restore"].values(), *(r.get("dataflow") or {}).get("count", {}).values()]
    for entry in entries:
        for run in entry.get("runs", []):
            if (run.get("system") in ("quix", "faust", "bytewax", "pathway")
                    and run.get("versions")):
                out.setdefault(run["system"], run["versions"])
    return out


def versions() -> dict[str, Any]:
    import confluent_kafka
    import rocksdict  # noqa: F401

    import millpond

    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "millpond": millpond.__version__,
        "confluent_kafka": pip_version(Path(sys.executable), "confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "rocksdict": pip_version(Path(sys.executable), "rocksdict"),
        "kafka_broker": kafka_version(),
        "kafka_broker_gc": kafka_gc(),
    }
    # The peers live in their own virtualenvs: ask those interpreters (after the workloads
    # ran, since a fresh machine creates the virtualenvs during the run). Each peer run also
    # reports the versions it ran with (meta.peer_versions).
    for peer, dist in systems.PEER_DIST.items():
        out[dist] = pip_version(venv_python(peer), dist)
    out["quix_confluent_kafka"] = pip_version(venv_python("quix"), "confluent-kafka")
    out["faust_aiokafka"] = pip_version(venv_python("faust"), "aiokafka")
    out["faust_rocksdict"] = pip_version(venv_python("faust"), "rocksdict")
    out["bytewax_confluent_kafka"] = pip_version(venv_python("bytewax"), "confluent-kafka")
    return out


def kafka_version() -> str:
    try:
        from millpond.dev import kafka as devkafka

        return str(getattr(devkafka, "KAFKA_VERSION", None) or "4.1.1")
    except Exception:
        return "unknown"


def kafka_gc() -> str | None:
    """The running dev broker's collector (g1 or zgc; `make bench` starts it with zgc)."""
    try:
        from millpond.dev.kafka import LocalKafka, running_gc

        pid = LocalKafka().status().pid
        return running_gc(pid) if pid is not None else None
    except Exception:  # noqa: BLE001 - a note in the results, never a failed run
        return None


def machine() -> dict[str, Any]:
    import os
    import platform

    return {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "ram_gib": round(ram_gib(), 1),
            "kernel": platform.release(), "load_average_start": load_average(),
            "cpu_ticks_start": cpu_ticks()}

"""`make bench`: millpond against raw client ceilings and against Quix Streams and Faust.

    .venv/bin/python -m benchmarks.run [--quick] [--runs N] [--only WORKLOAD] [--bootstrap B]

Workloads (``--only``, comma-separated or repeated): ``limits`` (raw confluent-kafka produce
and consume on the benchmark input, and consume + orjson decode; raw rocksdict comes from the
store micro-benchmark), ``count`` (per-user count into a changelogged RocksDB store: millpond
at each guarantee, Quix Streams, Faust; and millpond effectively-once once more per round with
the Prometheus reporter on and scraped every second: the reporter's cost), ``skew`` (the same count on a Zipf-keyed topic, 2M
messages over 1M users with exponent 1.1: hot keys and a long tail; millpond and Quix Streams,
with that topic's own consume and consume + decode ceilings), ``rss`` (peak RSS of the
millpond count with defaults on a uniform topic over 1M users), ``restore`` (rebuild the
count's state from its changelog: `millpond restore --full` and Quix Streams recovery),
``snapshot-restore`` (benchmarks/snapshot_restore.py: a 4M-record store partition restored
from an S3Proxy snapshot + changelog tail vs full changelog replay),
``store`` (benchmarks/store_micro.py and the hot-key benchmarks/store_hot.py) and ``spark``
(benchmarks/spark_rebuild.py, and benchmarks/spark_bootstrap.py: bootstrap a store from 2M
Parquet rows). Every figure is the median of the runs with min
and max; every count and restore is checked against the exact reference; every run records
the load average before it and the CPU steal during it.
Writes ``results.json``, ``results.md`` and ``readme-table.md`` (docs/benchmarks.md's table,
ready to paste) into ``--out-dir`` (default: benchmarks/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import data, report, systems
from benchmarks.common import (
    REPO,
    VENVS,
    Conditions,
    cpu_model,
    cpu_ticks,
    load_average,
    pip_version,
    ram_gib,
    steal_percent,
    summarize,
    venv_python,
)

# The count with the Prometheus reporter on (scraped every second), beside the same count without.
METRICS_KEY = report.METRICS_KEY
# The count with state backups to S3Proxy on, beside the same count without.
BACKUPS_KEY = report.BACKUPS_KEY
WORKLOADS = ("limits", "count", "skew", "rss", "restore", "snapshot-restore", "store", "spark")
ALL_SYSTEMS = ("millpond", "quix", "faust")

FULL = {"messages": 2_000_000, "users": 100_000, "faust_messages": 30_000,
        "store_ops": 1_000_000, "hot_ops": 2_000_000, "spark_records": 500_000,
        "spark_bootstrap_records": 2_000_000, "large_records": 200_000, "restore_sizes": "2000000,4000000,8000000",
        "skew_messages": 2_000_000, "skew_users": 1_000_000, "rss_messages": 2_000_000,
        "rss_users": 1_000_000, "snapshot_records": 4_000_000}
QUICK = {"messages": 20_000, "users": 2_000, "faust_messages": 5_000, "store_ops": 20_000,
         "hot_ops": 20_000, "spark_records": 20_000, "spark_bootstrap_records": 20_000,
         "large_records": 5_000,
         "restore_sizes": "5000,20000", "skew_messages": 20_000, "skew_users": 10_000,
         "rss_messages": 20_000, "rss_users": 10_000, "snapshot_records": 20_000}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (the smoke test)")
    p.add_argument("--runs", type=int, default=3, help="runs of each figure (default 3)")
    p.add_argument("--only", action="append", default=[], metavar="WORKLOAD",
                   help=f"run only these workloads ({', '.join(WORKLOADS)}); repeatable")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                   help="systems to count with (default: millpond,quix,faust)")
    p.add_argument("--messages", type=int, help="input messages (default 2M; --quick 20k)")
    p.add_argument("--users", type=int, help="distinct user ids (default 100k; --quick 2k)")
    p.add_argument("--partitions", type=int, default=4, help="input partitions (default 4)")
    p.add_argument("--peer-runs", type=int,
                   help="runs of each Quix Streams count (default: --runs; ~3 min each at 2M)")
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
    p.add_argument("--snapshot-records", type=int,
                   help="records of the store partition of the snapshot-restore workload "
                        "(default 4M; --quick 20k)")
    p.add_argument("--snapshot-tail-percent", type=float, default=2.0,
                   help="records written after the snapshot, in %% of --snapshot-records "
                        "(default 2)")
    p.add_argument("--spark-records", type=int,
                   help="changelog records of the Spark rebuild (default 500k; --quick 20k; "
                        "0 = skip)")
    p.add_argument("--spark-bootstrap-records", type=int,
                   help="Parquet rows of the Spark bootstrap (default 2M; --quick 20k; 0 = skip)")
    p.add_argument("--spark-runs", type=int, help="runs of the Spark rebuild (default: --runs)")
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
    bad = [s for s in args.system_list if s not in ALL_SYSTEMS]
    if bad:
        p.error(f"unknown system(s) {bad}; choose from {', '.join(ALL_SYSTEMS)}")
    sizes = QUICK if args.quick else FULL
    for key, value in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.peer_runs is None:
        args.peer_runs = args.runs
    args.faust_runs = args.faust_runs if args.faust_runs is not None else args.runs
    args.spark_runs = args.spark_runs if args.spark_runs is not None else args.runs
    if args.runs < 1:
        p.error("--runs must be at least 1")
    return args


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


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
    }
    # The peers live in their own virtualenvs: ask those interpreters (after the workloads
    # ran, since a fresh machine creates the virtualenvs during the run). Each peer run also
    # reports the versions it ran with (meta.peer_versions).
    for peer, dist in systems.PEER_DIST.items():
        out[dist] = pip_version(venv_python(peer), dist)
    out["quix_confluent_kafka"] = pip_version(venv_python("quix"), "confluent-kafka")
    out["faust_aiokafka"] = pip_version(venv_python("faust"), "aiokafka")
    out["faust_rocksdict"] = pip_version(venv_python("faust"), "rocksdict")
    return out


def kafka_version() -> str:
    try:
        from millpond.dev import kafka as devkafka

        return str(getattr(devkafka, "KAFKA_VERSION", None) or "4.1.1")
    except Exception:
        return "unknown"


def machine() -> dict[str, Any]:
    import os
    import platform

    return {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "ram_gib": round(ram_gib(), 1),
            "kernel": platform.release(), "load_average_start": load_average(),
            "cpu_ticks_start": cpu_ticks()}


# ---- workloads -------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.salt = uuid.uuid4().hex[:6]
        self.began = time.time()
        self.work = args.work_dir or Path(tempfile.mkdtemp(prefix="millpond-bench-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.ctx = systems.Ctx(args.bootstrap, self.salt, self.work, args.commit_ms / 1000.0,
                               timeout=max(300.0, args.messages / 1000.0))
        self.results: dict[str, Any] = {
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
                               "snapshot_records": args.snapshot_records},
                     "runs": args.runs, "peer_runs": args.peer_runs,
                     "faust_runs": args.faust_runs, "commit_ms": args.commit_ms,
                     "faust_linger_ms": args.faust_linger_ms, "spark_runs": args.spark_runs,
                     "workloads": args.workloads, "systems": args.system_list,
                     "quick": args.quick, "work_dir": str(self.work)},
            "limits": {}, "count": {}, "skew": {}, "rss": {}, "restore": {},
            "store_micro": None, "store_hot": None, "spark_rebuild": None,
            "spark_bootstrap": None, "snapshot_restore": None,
            "workload_conditions": {}, "problems": [],
        }
        self.topics: list[str] = []
        self.dataset: data.Dataset | None = None
        self.input_topic: str | None = None
        self.faust_topic: str | None = None
        self.faust_n = self.faust_users = 0
        self.faust_reference: dict[str, int] = {}
        self.peers_ready: dict[str, bool] = {}
        # Sources for the restore workload: a finished count job of each system.
        self.millpond_restore_config: Path | None = None
        self.quix_restore_spec: dict[str, Any] | None = None
        self.s3: Any = None  # millpond.dev.s3.LocalS3 of the backups-on count, once started

    def problem(self, what: str) -> None:
        say(f"PROBLEM: {what}")
        self.results["problems"].append(what)

    # ---- input -----------------------------------------------------------------------
    def ensure_input(self) -> None:
        if self.input_topic is not None:
            return
        a = self.args
        say(f"generating {a.messages:,} messages over {a.users:,} users")
        self.dataset = data.make_dataset(a.messages, a.users, a.partitions)
        self.ctx.reference = self.dataset.reference()
        self.input_topic = f"millpond-bench-input-{self.salt}"
        data.create_topic(a.bootstrap, self.input_topic, a.partitions)
        self.topics.append(self.input_topic)
        rate = data.produce(a.bootstrap, self.input_topic, self.dataset)
        self.results["input"] = {"topic": self.input_topic,
                                 **self.dataset.describe(self.ctx.reference), "produce": rate}
        say(f"input {self.input_topic}: {a.messages:,} msgs, "
            f"{rate['msgs_per_s']:,.0f} msg/s produced")

    # ---- limits ------------------------------------------------------------------------------
    def limits(self) -> None:
        self.ensure_input()
        assert self.dataset is not None and self.input_topic is not None
        a = self.args
        produce, consume, consume_json = [], [], []
        for r in range(a.runs):
            scratch = f"millpond-bench-produce-{self.salt}-{r}"
            data.create_topic(a.bootstrap, scratch, a.partitions)
            try:
                with Conditions() as cond:
                    rate = data.produce(a.bootstrap, scratch, self.dataset)
                produce.append({**rate, **cond.fields()})
            finally:
                data.delete_topics(a.bootstrap, [scratch])
            consume.append(self._ceiling(self.input_topic))
            consume_json.append(self._ceiling(self.input_topic, decode_json=True))
            say(f"limits run {r + 1}: produce {produce[-1]['msgs_per_s']:,.0f} msg/s, consume "
                f"{consume[-1]['msgs_per_s']:,.0f} msg/s, consume+json "
                f"{consume_json[-1]['msgs_per_s']:,.0f} msg/s")
        self.results["limits"] = {
            "produce_msgs_per_s": summarize([x["msgs_per_s"] for x in produce]),
            "produce_mb_per_s": summarize([x["mb_per_s"] for x in produce]),
            **self._ceilings(consume, consume_json, a.messages),
            "runs": {"produce": produce, "consume": consume, "consume_json": consume_json},
        }

    def _ceiling(self, topic: str, decode_json: bool = False) -> dict[str, Any]:
        """One raw consume of ``topic`` (with orjson decode when asked), with its conditions."""
        with Conditions() as cond:
            out = data.consume_all(self.args.bootstrap, topic, decode_json=decode_json)
        return {**out, **cond.fields()}

    def _ceilings(self, consume: list[dict[str, Any]], consume_json: list[dict[str, Any]],
                  messages: int) -> dict[str, Any]:
        for r in consume + consume_json:
            if r["records"] != messages:
                self.problem(f"raw consume read {r['records']} records, not {messages}")
        import orjson

        return {"consume_msgs_per_s": summarize([x["msgs_per_s"] for x in consume]),
                "consume_mb_per_s": summarize([x["mb_per_s"] for x in consume]),
                "consume_json_msgs_per_s": summarize([x["msgs_per_s"] for x in consume_json]),
                "json_decoder": f"orjson {orjson.__version__} (millpond's json serde)"}

    # ---- count -------------------------------------------------------------------------------
    def peer_ready(self, peer: str) -> bool:
        if peer not in self.peers_ready:
            say(f"checking the {peer} virtualenv under {VENVS}")
            ok, why = systems.ensure_peer(peer, install=not self.args.no_install)
            self.peers_ready[peer] = ok
            if not ok:
                self.problem(f"{peer} cannot run: {why}")
        return self.peers_ready[peer]

    def ensure_faust_topic(self) -> None:
        if self.faust_topic is not None:
            return
        assert self.dataset is not None
        a = self.args
        n = min(a.faust_messages, a.messages)
        # Scaled down, not a prefix: the same generator with the same messages per user.
        users = max(1, round(a.users * n / a.messages))
        subset = data.make_dataset(n, users, a.partitions)
        self.faust_topic = f"millpond-bench-input-small-{self.salt}"
        data.create_topic(a.bootstrap, self.faust_topic, a.partitions)
        self.topics.append(self.faust_topic)
        data.produce(a.bootstrap, self.faust_topic, subset)
        self.faust_reference = subset.reference()
        self.faust_n, self.faust_users = n, users
        self.results["faust_input"] = {"topic": self.faust_topic, "messages": n, "users": users,
                                       "partitions": a.partitions}

    def count(self) -> None:
        self.ensure_input()
        assert self.input_topic is not None
        a, ctx = self.args, self.ctx
        runs: dict[str, list[dict[str, Any]]] = {}
        plan = self._plan()
        faust = "faust" in a.system_list and self.peer_ready("faust")
        if faust:
            self.ensure_faust_topic()
        eo = ("millpond", "effectively-once")
        for r in range(a.runs):
            # Interleaved rounds: background load on the shared machine hits every system alike.
            # The reporter-on run sits right beside the effectively-once run it is compared
            # with (before it in odd rounds, after it in even ones), so drifting load hits both;
            # so does the backups-on run.
            def metrics_run(r: int = r) -> None:
                runs.setdefault(METRICS_KEY, []).append(self._metrics_run(r))
                if a.backup_interval_ms >= 0:
                    runs.setdefault(BACKUPS_KEY, []).append(self._backups_run(r))

            first = r % 2 == 1
            for key, res in self._count_round(r, plan, self.input_topic, a.messages,
                                              ctx.reference, str(r),
                                              beside_eo=(metrics_run if eo in plan else None),
                                              before=first):
                if res.get("correct") and key == "millpond effectively-once":
                    self.millpond_restore_config = Path(res["config"])
                if res.get("correct") and key == "quix at-least-once":
                    self.quix_restore_spec = res["spec"]
                runs.setdefault(key, []).append(res)
            if faust and r < a.faust_runs:
                assert self.faust_topic is not None
                for system in ("faust", "millpond"):
                    key = f"{system} at-least-once (small topic)"
                    say(f"count run {r + 1}/{a.faust_runs}: {key} on {self.faust_n:,} msgs")
                    try:
                        if system == "faust":
                            settings = ({"producer_linger_ms": a.faust_linger_ms}
                                        if a.faust_linger_ms >= 0 else None)
                            res = systems.faust_count(ctx, self.faust_topic, self.faust_n,
                                                      a.partitions, str(r),
                                                      self.faust_reference, settings)
                        else:
                            res = systems.millpond_count(ctx, self.faust_topic, self.faust_n,
                                                         "at-least-once", f"fp{r}",
                                                         self.faust_reference)
                    except Exception as exc:
                        res = {"system": system, "guarantee": "at-least-once", "ok": False,
                               "error": f"{exc!r}\n{traceback.format_exc()[-1500:]}"}
                    runs.setdefault(key, []).append(res)
                    self._say_run(key, res)
        self.results["count"] = {key: self._summarize_runs(rs) for key, rs in runs.items()}
        self._report_bad_runs("count", runs)

    def _metrics_run(self, r: int) -> dict[str, Any]:
        """Round ``r``'s effectively-once count once more, with the Prometheus reporter on
        and scraped every second (its cost: the ratio to the same round's run without it)."""
        a, ctx = self.args, self.ctx
        assert self.input_topic is not None
        say(f"count run {r + 1}/{a.runs}: {METRICS_KEY} on {a.messages:,} msgs "
            f"(load {load_average()})")
        try:
            res = systems.millpond_count(ctx, self.input_topic, a.messages, "effectively-once",
                                         f"m{r}", ctx.reference, metrics=True)
        except Exception as exc:
            res = {"system": "millpond", "guarantee": "effectively-once", "ok": False,
                   "error": f"{exc!r}\n{traceback.format_exc()[-1500:]}"}
        self._say_run(METRICS_KEY, res)
        return res

    def _backups_run(self, r: int) -> dict[str, Any]:
        """Round ``r``'s effectively-once count once more with state backups to S3Proxy on
        (their cost: the ratio to the same round's run without)."""
        a, ctx = self.args, self.ctx
        assert self.input_topic is not None
        say(f"count run {r + 1}/{a.runs}: {BACKUPS_KEY} on {a.messages:,} msgs "
            f"(load {load_average()})")
        try:
            res = systems.millpond_count(ctx, self.input_topic, a.messages, "effectively-once",
                                         f"b{r}", ctx.reference, backups=self.s3_backups())
        except Exception as exc:
            res = {"system": "millpond", "guarantee": "effectively-once", "ok": False,
                   "error": f"{exc!r}\n{traceback.format_exc()[-1500:]}"}
        self._say_run(BACKUPS_KEY, res)
        return res

    def s3_backups(self) -> dict[str, str]:
        """``job.state.backup.*`` properties of an S3Proxy this run starts (once)."""
        if self.s3 is None:
            import s3fs

            from millpond.dev.s3 import LocalS3

            self.s3 = LocalS3(self.work / "s3", port=systems.free_port())
            say(f"starting S3Proxy on {self.s3.endpoint} for the backups-on count")
            self.s3.start(timeout=120)
            s3fs.S3FileSystem(**self.s3.storage_options(), skip_instance_cache=True).call_s3(
                "create_bucket", Bucket="millpond-bench")
        opts = self.s3.storage_options()
        return {"job.state.backup.uri": "s3://millpond-bench/count",
                "job.state.backup.interval.ms": str(self.args.backup_interval_ms),
                "job.state.backup.options.key": opts["key"],
                "job.state.backup.options.secret": opts["secret"],
                "job.state.backup.options.client_kwargs.endpoint_url":
                    opts["client_kwargs"]["endpoint_url"],
                "job.state.backup.options.client_kwargs.region_name": "us-east-1"}

    def _plan(self) -> list[tuple[str, str]]:
        """(system, guarantee) of one round of counts: millpond's three, then Quix's two."""
        a = self.args
        plan: list[tuple[str, str]] = []
        if "millpond" in a.system_list:
            plan += [("millpond", g) for g in systems.MILLPOND_GUARANTEES]
        if "quix" in a.system_list and self.peer_ready("quix"):
            plan += [("quix", g) for g in systems.QUIX_GUARANTEES]
        return plan

    def _count_round(self, r: int, plan: list[tuple[str, str]], topic: str, messages: int,
                     reference: dict[str, int], tag: str, label: str = "",
                     beside_eo: Callable[[], None] | None = None,
                     before: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """Round ``r``: one verified count of ``topic`` by each (system, guarantee) of ``plan``
        (Quix Streams only in the first --peer-runs rounds); ``beside_eo`` runs right
        before (``before``) or after millpond's effectively-once count."""
        a, ctx = self.args, self.ctx
        out = []
        for system, guarantee in plan:
            if system != "millpond" and r >= a.peer_runs:
                continue
            is_eo = (system, guarantee) == ("millpond", "effectively-once")
            if is_eo and beside_eo is not None and before:
                beside_eo()
            key = f"{system} {guarantee}"
            say(f"{label or 'count'} run {r + 1}/{a.runs}: {key} on {messages:,} msgs "
                f"(load {load_average()})")
            try:
                if system == "millpond":
                    res = systems.millpond_count(ctx, topic, messages, guarantee, tag, reference)
                else:
                    res = systems.quix_count(ctx, topic, messages, guarantee, tag, reference)
            except Exception as exc:
                res = {"system": system, "guarantee": guarantee, "ok": False,
                       "error": f"{exc!r}\n{traceback.format_exc()[-1500:]}"}
            self._say_run(key, res)
            out.append((key, res))
            if is_eo and beside_eo is not None and not before:
                beside_eo()
        return out

    def _topic(self, kind: str, dataset: data.Dataset) -> str:
        """A new input topic of this run holding ``dataset``."""
        a = self.args
        topic = f"millpond-bench-{kind}-{self.salt}"
        data.create_topic(a.bootstrap, topic, a.partitions)
        self.topics.append(topic)
        rate = data.produce(a.bootstrap, topic, dataset)
        say(f"input {topic}: {dataset.messages:,} msgs, {rate['msgs_per_s']:,.0f} msg/s produced")
        return topic

    # ---- skew --------------------------------------------------------------------------------
    def skew(self) -> None:
        """The count on Zipf-distributed keys, with that topic's own ceilings, millpond at each
        guarantee and Quix Streams, in interleaved rounds."""
        a = self.args
        say(f"generating {a.skew_messages:,} messages over {a.skew_users:,} Zipf-ranked users "
            f"(exponent {a.skew_exponent}, seed {a.seed})")
        began = time.perf_counter()
        dataset = data.make_dataset(a.skew_messages, a.skew_users, a.partitions,
                                    zipf=a.skew_exponent, seed=a.seed)
        reference = dataset.reference()
        described = dataset.describe(reference)
        described["generate_s"] = round(time.perf_counter() - began, 1)
        say(f"skewed input: {described['distinct_users']:,} distinct users, the hottest has "
            f"{described['hottest_user_share']:.1%} of the messages, the top 100 "
            f"{described['top_100_users_share']:.1%} (generated in {described['generate_s']} s)")
        topic = self._topic("skewed", dataset)
        del dataset  # the reference is all the runs need
        self.results["skew"] = {"input": {"topic": topic, **described}}
        plan = self._plan()
        consume: list[dict[str, Any]] = []
        consume_json: list[dict[str, Any]] = []
        runs: dict[str, list[dict[str, Any]]] = {}
        for r in range(a.runs):
            consume.append(self._ceiling(topic))
            consume_json.append(self._ceiling(topic, decode_json=True))
            say(f"skew ceilings run {r + 1}: consume {consume[-1]['msgs_per_s']:,.0f} msg/s, "
                f"consume+orjson {consume_json[-1]['msgs_per_s']:,.0f} msg/s")
            for key, res in self._count_round(r, plan, topic, a.skew_messages, reference,
                                              f"z{r}", "skew"):
                runs.setdefault(key, []).append(res)
        self.results["skew"].update({
            "limits": {**self._ceilings(consume, consume_json, a.skew_messages),
                       "runs": {"consume": consume, "consume_json": consume_json}},
            "count": {key: self._summarize_runs(rs) for key, rs in runs.items()},
        })
        self._report_bad_runs("skew", runs)

    # ---- rss ---------------------------------------------------------------------------------
    def rss(self) -> None:
        """Peak RSS (and speed) of the millpond count with defaults (effectively-once) on a
        uniform topic over --rss-users users."""
        a = self.args
        if "millpond" not in a.system_list:
            return
        say(f"generating {a.rss_messages:,} messages over {a.rss_users:,} users (uniform)")
        dataset = data.make_dataset(a.rss_messages, a.rss_users, a.partitions)
        reference = dataset.reference()
        described = dataset.describe(reference)
        topic = self._topic("users", dataset)
        del dataset
        self.results["rss"] = {"input": {"topic": topic, **described}}
        key = "millpond effectively-once"
        runs: list[dict[str, Any]] = []
        for r in range(a.runs):
            for _, res in self._count_round(r, [("millpond", "effectively-once")], topic,
                                            a.rss_messages, reference, f"u{r}", "rss"):
                runs.append(res)
        self.results["rss"]["count"] = {key: self._summarize_runs(runs)}
        self._report_bad_runs("rss", {key: runs})

    def _report_bad_runs(self, workload: str, runs: dict[str, list[dict[str, Any]]]) -> None:
        """A problem line for every run that failed or whose result is wrong."""
        for key, rs in runs.items():
            for i, res in enumerate(rs):
                if not res.get("ok"):
                    self.problem(f"{workload} {key} run {i + 1} failed: "
                                 f"{str(res.get('error'))[:800]}")
                elif not res.get("correct"):
                    self.problem(f"{workload} {key} run {i + 1} is WRONG: {res.get('examples')}")

    def _say_run(self, key: str, res: dict[str, Any]) -> None:
        if not res.get("ok"):
            say(f"  {key}: FAILED {str(res.get('error'))[:300]}")
            return
        verdict = "correct" if res.get("correct") else "WRONG"
        rate = res.get("msgs_per_s") or res.get("records_per_s") or 0
        say(f"  {key}: {rate:,.0f}/s, wall {res.get('process_wall_s', 0):.1f}s, "
            f"cpu {res.get('cpu_s', 0):.1f}s, rss {res.get('maxrss_mb', 0):.0f} MB, {verdict}")

    @staticmethod
    def _summarize_runs(rs: list[dict[str, Any]]) -> dict[str, Any]:
        good = [r for r in rs if r.get("ok") and r.get("correct")]
        out: dict[str, Any] = {"runs": rs, "good_runs": len(good), "all_runs": len(rs),
                               "wrong": any(r.get("ok") and not r.get("correct") for r in rs),
                               "failed": any(not r.get("ok") for r in rs)}
        fields = ("msgs_per_s", "msgs_per_s_incl_startup", "processing_s", "startup_s",
                  "process_wall_s", "cpu_s", "maxrss_mb", "restore_s", "records_per_s",
                  "records_per_s_wall", "wall_to_done_s", "mb_per_s", "mb_per_s_value")
        for f in fields:
            vals = [r[f] for r in good if r.get(f) is not None]
            if vals:
                out[f] = summarize(vals)
        cpu_per_m = [r["cpu_s"] / (r["messages"] / 1e6) for r in good
                     if r.get("cpu_s") is not None and r.get("messages")]
        if cpu_per_m:
            out["cpu_s_per_million"] = summarize(cpu_per_m)
        return out

    # ---- restore -----------------------------------------------------------------------------
    def restore(self) -> None:
        self.ensure_input()
        assert self.input_topic is not None
        a, ctx = self.args, self.ctx
        if "millpond" in a.system_list and self.millpond_restore_config is None:
            say("restore: running one millpond effectively-once count to make its changelog")
            res = systems.millpond_count(ctx, self.input_topic, a.messages, "effectively-once",
                                         "rs", ctx.reference)
            if res.get("ok") and res.get("correct"):
                self.millpond_restore_config = Path(res["config"])
            else:
                self.problem(f"restore: the millpond source count failed or is WRONG: "
                             f"{str(res.get('error') or res.get('examples'))[:500]}")
        quix = "quix" in a.system_list and self.peer_ready("quix")
        if quix and self.quix_restore_spec is None:
            say("restore: running one Quix at-least-once count to make its changelog")
            res = systems.quix_count(ctx, self.input_topic, a.messages, "at-least-once", "rs",
                                     ctx.reference)
            if res.get("ok") and res.get("correct"):
                self.quix_restore_spec = res["spec"]
            else:
                self.problem(f"restore: the Quix source count failed or is WRONG: "
                             f"{str(res.get('error') or res.get('examples'))[:500]}")
        changelogs = {}
        if self.millpond_restore_config is not None:
            name = self.millpond_restore_config.parent.name
            changelogs["millpond"] = data.topic_size(a.bootstrap, f"{name}-counts-changelog")
        if self.quix_restore_spec is not None:
            group = self.quix_restore_spec["group"]
            topic = next((t for t in data.list_topics(a.bootstrap)
                          if t.startswith("changelog__") and group in t), None)
            if topic:
                changelogs["quix"] = data.topic_size(a.bootstrap, topic)
        runs: dict[str, list[dict[str, Any]]] = {}
        for r in range(a.runs):
            if self.millpond_restore_config is not None:
                say(f"restore run {r + 1}/{a.runs}: millpond restore --full")
                try:
                    res = systems.millpond_restore(ctx, self.millpond_restore_config, str(r),
                                                   ctx.reference)
                    cl = changelogs["millpond"]
                    if res.get("ok") and res.get("restore_s"):
                        res["changelog_bytes"] = cl["bytes"]
                        res["mb_per_s"] = cl["bytes"] / 1e6 / res["restore_s"]
                        res["mb_per_s_value"] = res["value_bytes"] / 1e6 / res["restore_s"]
                except Exception as exc:
                    res = {"system": "millpond", "ok": False, "error": repr(exc)}
                runs.setdefault("millpond restore --full", []).append(res)
                self._say_run("millpond restore --full", res)
            if quix and self.quix_restore_spec is not None:
                say(f"restore run {r + 1}/{a.runs}: Quix Streams recovery on deleted state")
                try:
                    res = systems.quix_recover(ctx, self.quix_restore_spec, str(r), ctx.reference)
                    cl = changelogs.get("quix")
                    if res.get("ok") and cl:
                        res["records"] = cl["records"]
                        res["changelog_bytes"] = cl["bytes"]
                        res["records_per_s"] = cl["records"] / res["restore_s"]
                        res["mb_per_s"] = cl["bytes"] / 1e6 / res["restore_s"]
                except Exception as exc:
                    res = {"system": "quix", "ok": False, "error": repr(exc)}
                runs.setdefault("quix recovery", []).append(res)
                self._say_run("quix recovery", res)
        if "millpond" in a.system_list and a.large_records > 0:
            runs["millpond restore --full (1 KB values)"] = self.restore_large(changelogs)
        if "millpond" in a.system_list and a.restore_sizes:
            got = self._script("restore_scaling", {"--bootstrap": a.bootstrap,
                                                   "--sizes": a.restore_sizes}, timeout=3600)
            if got is not None:
                self.results["restore_scaling"] = got
        self.results["restore"] = {key: self._summarize_runs(rs) for key, rs in runs.items()}
        self.results["restore_changelogs"] = changelogs
        self._report_bad_runs("restore", runs)

    def restore_large(self, changelogs: dict[str, Any]) -> list[dict[str, Any]]:
        """`millpond restore --full` of a synthetic changelog with 1 KB values (MB/s figure)."""
        a, ctx = self.args, self.ctx
        name = f"mpb-{self.salt}-large"
        config = systems.large_restore_config(ctx, name, a.partitions)
        topic = f"{name}-counts-changelog"
        keys = max(1, a.large_records // 2)
        changelog = data.large_changelog(a.large_records, keys, 1000, a.partitions)
        data.create_topic(a.bootstrap, topic, a.partitions, **{"cleanup.policy": "compact"})
        data.produce(a.bootstrap, topic, changelog)
        changelogs["millpond (1 KB values)"] = {"records": changelog.messages,
                                                "bytes": changelog.payload_bytes}
        want = data.final_values(changelog)
        del changelog
        out = []
        for r in range(a.runs):
            say(f"restore run {r + 1}/{a.runs}: millpond restore --full, {a.large_records:,} "
                f"records of 1 KB")
            try:
                res = systems.millpond_restore(ctx, config, str(r), want)
                if res.get("ok") and res.get("restore_s"):
                    cl = changelogs["millpond (1 KB values)"]
                    res["changelog_bytes"] = cl["bytes"]
                    res["mb_per_s"] = cl["bytes"] / 1e6 / res["restore_s"]
                    res["mb_per_s_value"] = res["value_bytes"] / 1e6 / res["restore_s"]
            except Exception as exc:
                res = {"system": "millpond", "ok": False, "error": repr(exc)}
            out.append(res)
            self._say_run("millpond restore --full (1 KB values)", res)
        return out

    # ---- helpers' benchmarks -------------------------------------------------------------------
    def _script(self, module: str, args: dict[str, str], timeout: float) -> dict[str, Any] | None:
        """Run ``python -m benchmarks.<module>`` once with the options it supports."""
        script = REPO / "benchmarks" / f"{module}.py"
        if not script.exists():
            self.problem(f"benchmarks/{module}.py is not present; its figures are missing")
            return None
        helptext = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--help"],
                                  cwd=REPO, capture_output=True, text=True, timeout=120).stdout
        out = self.work / f"{module}-{uuid.uuid4().hex[:6]}.json"
        flag = "--json-out" if "--json-out" in helptext else "--out" if "--out" in helptext else None
        if flag is None:
            self.problem(f"benchmarks/{module}.py has neither --json-out nor --out")
            return None
        cmd = [sys.executable, "-m", f"benchmarks.{module}"]
        for opt, value in args.items():
            if opt in helptext:
                cmd += [opt, value]
        say(f"running {' '.join(cmd[1:])}")
        began = time.time()
        done = subprocess.run([*cmd, flag, str(out)], cwd=REPO, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0 or not out.exists():
            self.problem(f"benchmarks/{module}.py failed (exit {done.returncode}): "
                         f"{(done.stdout + done.stderr)[-1500:]}")
            return None
        return {"command": "python " + " ".join(cmd[1:]), "seconds": round(time.time() - began, 1),
                "stdout": done.stdout[-3000:], "result": json.loads(out.read_text())}

    def snapshot_restore(self) -> None:
        """benchmarks/snapshot_restore.py: snapshot + tail vs full changelog replay."""
        a = self.args
        got = self._script("snapshot_restore", {
            "--bootstrap": a.bootstrap, "--records": str(a.snapshot_records),
            "--tail-percent": str(a.snapshot_tail_percent), "--runs": str(a.runs)},
            timeout=7200)
        if got is None:
            return
        if not got["result"].get("stores_equal"):
            self.problem("snapshot-restore: a restored store is WRONG (differs from the job's)")
        self.results["snapshot_restore"] = got

    def store(self) -> None:
        self.store_micro()
        self.store_hot()

    def store_micro(self) -> None:
        a = self.args
        got = self._script("store_micro", {"--ops": str(a.store_ops), "--value-size": "100",
                                           "--repeat": str(a.runs)}, timeout=1800)
        if got is None:
            return
        res = got["result"]
        for side, key in (("raw_rocksdict", "raw_rocksdict_runs"), ("millpond", "millpond_runs")):
            runs = res.get(key) or ([res[side]] if side in res else [])
            got[side] = {m: summarize([r[m] for r in runs if m in r])
                         for m in ("put_per_s", "put_incl_flush_per_s", "get_per_s")}
        self.results["store_micro"] = got

    def store_hot(self) -> None:
        """Put and get of one hot key: millpond's cached store beside raw rocksdict."""
        a = self.args
        got = self._script("store_hot", {"--ops": str(a.hot_ops), "--repeat": str(a.runs)},
                           timeout=1800)
        if got is None:
            return
        res = got["result"]
        for side in ("raw_rocksdict", "millpond"):
            runs = res.get(f"{side}_runs") or []
            got[side] = {m: summarize([r[m] for r in runs if m in r])
                         for m in ("put_per_s", "get_per_s", "increment_per_s")}
        self.results["store_hot"] = got

    def spark(self) -> None:
        a = self.args
        if a.spark_records != 0:
            self.results["spark_rebuild"] = self._spark_script(
                "spark_rebuild", "rebuild", a.spark_records)
        if a.spark_bootstrap_records != 0:
            self.results["spark_bootstrap"] = self._spark_script(
                "spark_bootstrap", "bootstrap", a.spark_bootstrap_records)

    def _spark_script(self, module: str, what: str, records: int | None) -> dict[str, Any] | None:
        """``--spark-runs`` runs of a Spark benchmark script; its figures summarized."""
        a = self.args
        opts = {"--bootstrap": a.bootstrap}
        if records:
            opts["--records"] = str(records)
        runs = []
        for r in range(a.spark_runs):
            got = self._script(module, opts, timeout=1800)
            if got is None:
                break
            runs.append(got)
            rate = got["result"].get("records_per_second")
            say(f"  spark {what} run {r + 1}: {rate} records/s")
        if not runs:
            return None
        numbers: dict[str, list[float]] = {}
        for got in runs:
            for k, v in got["result"].items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    numbers.setdefault(k, []).append(v)
        return {"command": runs[0]["command"], "runs": [g["result"] for g in runs],
                "figures": {k: summarize(v) for k, v in numbers.items()}}

    # ---- driver --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        a = self.args
        say(f"workloads {a.workloads}, systems {a.system_list}, runs {a.runs}, "
            f"work dir {self.work}")
        steps = {"limits": self.limits, "count": self.count, "skew": self.skew,
                 "rss": self.rss, "restore": self.restore,
                 "snapshot-restore": self.snapshot_restore, "store": self.store,
                 "spark": self.spark}
        try:
            for w in WORKLOADS:
                if w in a.workloads:
                    began = time.time()
                    with Conditions() as cond:
                        try:
                            steps[w]()
                        except Exception as exc:
                            self.problem(f"workload {w} crashed: {exc!r}\n"
                                         f"{traceback.format_exc()[-2000:]}")
                    seconds = round(time.time() - began, 1)
                    self.results.setdefault("workload_seconds", {})[w] = seconds
                    self.results["workload_conditions"][w] = {
                        "seconds": seconds, **cond.fields(),
                        "load_average_after": load_average()}
        finally:
            meta = self.results["meta"]
            machine = meta["machine"]
            machine["load_average_end"] = load_average()
            machine["cpu_steal_percent"] = steal_percent(machine.pop("cpu_ticks_start"),
                                                         cpu_ticks())
            meta["seconds"] = round(time.time() - self.began, 1)
            # Now, not at start: a fresh machine creates the peers' virtualenvs mid-run.
            meta["versions"] = versions()
            meta["peer_versions"] = self.peer_versions()
            if self.s3 is not None:
                self.s3.stop()
            if not a.keep:
                self.cleanup()
        return self.results

    def peer_versions(self) -> dict[str, dict[str, Any]]:
        """The versions each peer reported from inside its runs (what actually ran)."""
        out: dict[str, dict[str, Any]] = {}
        r = self.results
        entries = [*r["count"].values(), *(r.get("skew") or {}).get("count", {}).values(),
                   *r["restore"].values()]
        for entry in entries:
            for run in entry.get("runs", []):
                if run.get("system") in ("quix", "faust") and run.get("versions"):
                    out.setdefault(run["system"], run["versions"])
        return out

    def cleanup(self) -> None:
        try:
            mine = [t for t in data.list_topics(self.args.bootstrap) if self.salt in t]
            data.delete_topics(self.args.bootstrap, mine)
        except Exception as exc:
            say(f"could not delete the benchmark topics: {exc!r}")
        systems.cleanup_dirs(self.work)  # state goes; configs and logs stay for a look


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    results = bench.run()
    paths = report.write_all(results, args.out_dir)
    print(paths[1].read_text())
    say("wrote " + ", ".join(str(p) for p in paths) + f"; paste {paths[2].name} into the "
        "table of docs/benchmarks.md")
    return 1 if any("WRONG" in p for p in results["problems"]) else 0


if __name__ == "__main__":
    sys.exit(main())

"""What every workload of `make bench` shares: the run's arguments, its results dict, problem
lines, scratch space, the benchmark input topics, the peers' virtualenvs and running one of the
benchmark scripts (``python -m benchmarks.<module>``) in a subprocess.

A workload is a function of a :class:`Harness` (``benchmarks/workloads/*``); it writes its
figures into ``harness.results`` and reports what went wrong with ``harness.problem()``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import data, meta, systems
from benchmarks.common import REPO, VENVS, summarize


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Harness:
    """One `make bench` run: its arguments, results and the topics and state it made."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.salt = uuid.uuid4().hex[:6]
        self.began = time.time()
        self.work = args.work_dir or Path(tempfile.mkdtemp(prefix="millpond-bench-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.ctx = systems.Ctx(args.bootstrap, self.salt, self.work, args.commit_ms / 1000.0,
                               timeout=max(300.0, args.messages / 1000.0))
        self.results: dict[str, Any] = meta.start_results(args, self.work)
        self.topics: list[str] = []
        self.dataset: data.Dataset | None = None
        self.input_topic: str | None = None
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

    def topic(self, kind: str, dataset: data.Dataset) -> str:
        """A new input topic of this run holding ``dataset``."""
        a = self.args
        topic = f"millpond-bench-{kind}-{self.salt}"
        data.create_topic(a.bootstrap, topic, a.partitions)
        self.topics.append(topic)
        rate = data.produce(a.bootstrap, topic, dataset)
        say(f"input {topic}: {dataset.messages:,} msgs, {rate['msgs_per_s']:,.0f} msg/s produced")
        return topic

    def peer_ready(self, peer: str) -> bool:
        if peer not in self.peers_ready:
            say(f"checking the {peer} virtualenv under {VENVS}")
            ok, why = systems.ensure_peer(peer, install=not self.args.no_install)
            self.peers_ready[peer] = ok
            if not ok:
                self.problem(f"{peer} cannot run: {why}")
        return self.peers_ready[peer]

    # ---- benchmark scripts -------------------------------------------------------------
    def script(self, module: str, args: dict[str, str], timeout: float) -> dict[str, Any] | None:
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
                cmd += [opt, value] if value != "" else [opt]  # "": a flag
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

    # ---- runs of a system ----------------------------------------------------------------
    def report_bad_runs(self, workload: str, runs: dict[str, list[dict[str, Any]]]) -> None:
        """A problem line for every run that failed or whose result is wrong."""
        for key, rs in runs.items():
            for i, res in enumerate(rs):
                if not res.get("ok"):
                    self.problem(f"{workload} {key} run {i + 1} failed: "
                                 f"{str(res.get('error'))[:800]}")
                elif not res.get("correct"):
                    self.problem(f"{workload} {key} run {i + 1} is WRONG: {res.get('examples')}")

    # ---- end ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the S3Proxy a workload started; unless --keep, delete this run's topics and
        state (configs and logs stay for a look)."""
        if self.s3 is not None:
            self.s3.stop()
        if not self.args.keep:
            self.cleanup()

    def cleanup(self) -> None:
        try:
            mine = [t for t in data.list_topics(self.args.bootstrap) if self.salt in t]
            data.delete_topics(self.args.bootstrap, mine)
        except Exception as exc:
            say(f"could not delete the benchmark topics: {exc!r}")
        systems.cleanup_dirs(self.work)  # state goes; configs and logs stay for a look


def say_run(key: str, res: dict[str, Any]) -> None:
    if not res.get("ok"):
        say(f"  {key}: FAILED {str(res.get('error'))[:300]}")
        return
    verdict = "correct" if res.get("correct") else "WRONG"
    rate = res.get("msgs_per_s") or res.get("records_per_s") or 0
    say(f"  {key}: {rate:,.0f}/s, wall {res.get('process_wall_s', 0):.1f}s, "
        f"cpu {res.get('cpu_s', 0):.1f}s, rss {res.get('maxrss_mb', 0):.0f} MB, {verdict}")


def summarize_runs(rs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in rs if r.get("ok") and r.get("correct")]
    out: dict[str, Any] = {"runs": rs, "good_runs": len(good), "all_runs": len(rs),
                           "wrong": any(r.get("ok") and not r.get("correct") for r in rs),
                           "failed": any(not r.get("ok") for r in rs)}
    fields = ("msgs_per_s", "msgs_per_s_incl_startup", "processing_s", "startup_s",
              "process_wall_s", "cpu_s", "maxrss_mb", "restore_s", "records_per_s",
              "records_per_s_wall", "wall_to_done_s", "mb_per_s", "mb_per_s_value",
              "msgs_per_s_to_90pct_sent", "sent_90pct_s", "last_output_s",
              "end_after_last_output_s", "queries_per_s", "query_p50_ms", "query_p99_ms",
              "driver_cpu_s")
    for f in fields:
        vals = [r[f] for r in good if r.get(f) is not None]
        if vals:
            out[f] = summarize(vals)
    cpu_per_m = [r["cpu_s"] / (r["messages"] / 1e6) for r in good
                 if r.get("cpu_s") is not None and r.get("messages")]
    if cpu_per_m:
        out["cpu_s_per_million"] = summarize(cpu_per_m)
    return out

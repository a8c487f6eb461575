"""One stateful-count or restore run of each system, each verified against the reference.

millpond runs as ``millpond run --bounded`` (fresh job name and state per run); Quix
Streams, Faust, Bytewax and Pathway run from their own virtualenvs (``benchmarks/peers/*``).
Every run returns a dict with its timings, CPU (wait4 of the child), peak RSS and
``correct``: the final per-user counts compared with the reference. A run whose counts
differ is marked WRONG and its speed is not used.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import MILLPOND, REPO, VENVS, Child, run_child, venv_python
from benchmarks.query_driver import phase_rates

PEERS = Path(__file__).resolve().parent / "peers"

MILLPOND_GUARANTEES = ("at-least-once", "effectively-once", "exactly-once")
QUIX_GUARANTEES = ("at-least-once", "exactly-once")
SHORT = {"at-least-once": "alo", "effectively-once": "eo", "exactly-once": "eos",
         "at_least_once": "alo", "exactly_once": "eos"}

# What each peer is installed from, into VENVS/<name>.
# Bytewax is pinned: its API changed between minor versions (0.21 is the issue's). orjson
# beside it: its count decodes with millpond's JSON decoder, so the decoder is not the difference.
# Pathway is pinned too (issue #39: 0.33); its engine has its own librdkafka built in.
PEER_PACKAGES = {"quix": ["quixstreams"], "faust": ["faust-streaming[rocksdict]"],
                 "bytewax": ["bytewax[kafka]==0.21.1", "orjson"],
                 "pathway": ["pathway==0.33.0"]}
PEER_IMPORT = {"quix": "quixstreams", "faust": "faust", "bytewax": "bytewax.dataflow, orjson",
               "pathway": "pathway"}
PEER_DIST = {"quix": "quixstreams", "faust": "faust-streaming", "bytewax": "bytewax",
             "pathway": "pathway"}


@dataclass
class Ctx:
    """What every run needs: where the broker is, the input, the reference, scratch space."""

    bootstrap: str
    salt: str
    work: Path
    commit_s: float
    reference: dict[str, int] = field(default_factory=dict)
    timeout: float = 900.0


def compare(got: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """Whether ``got`` equals ``want`` exactly, with a few differences when not."""
    if got == want:
        total = sum(v for v in got.values() if isinstance(v, int))
        return {"correct": True, "keys": len(got), "total": total}
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    diff = [(k, str(got[k])[:40], str(want[k])[:40]) for k in want
            if k in got and got[k] != want[k]]
    total = sum(v for v in got.values() if isinstance(v, int))
    return {"correct": False, "keys": len(got), "total": total, "missing": len(missing),
            "extra": len(extra), "different": len(diff), "examples": diff[:5] + missing[:3]}


def _rates(messages: int, started: float, first: float | None, end: float) -> dict[str, Any]:
    out: dict[str, Any] = {"wall_s": end - started}
    if first is not None and end > first:
        out["processing_s"] = end - first
        out["startup_s"] = first - started
        out["msgs_per_s"] = messages / (end - first)
    out["msgs_per_s_incl_startup"] = messages / (end - started)
    return out


# ---- millpond ---------------------------------------------------------------------------
def millpond_props(ctx: Ctx, name: str, topic: str, guarantee: str, state: Path,
                   timing: Path, app: str | None = None,
                   output: str | None = None) -> dict[str, Any]:
    """The count job's properties: the StreamTask (BenchCounter), or with ``app`` the
    dataflow ``benchmarks.jobs:<app>`` (its ``counts`` store compiled from the app, with the
    same serdes), reading ``topic`` and writing ``output``."""
    if app is not None:
        props: dict[str, Any] = {
            "job.name": name,
            "app.class": f"benchmarks.jobs:{app}",
            "bench.input": f"kafka.{topic}",
            "task.commit.ms": int(ctx.commit_s * 1000),
            "task.processing.guarantee": guarantee,
            "systems.kafka.bootstrap.servers": ctx.bootstrap,
            "systems.kafka.samza.key.serde": "string",
            "systems.kafka.samza.msg.serde": "json",
            "job.logged.store.base.dir": str(state),
            "bench.timing.file": str(timing),
        }
        if output:
            props["bench.output"] = f"kafka.{output}"
        return props
    return {
        "job.name": name,
        "task.class": "benchmarks.jobs.BenchCounter",
        "task.inputs": f"kafka.{topic}",
        "task.commit.ms": int(ctx.commit_s * 1000),
        "task.processing.guarantee": guarantee,
        "systems.kafka.bootstrap.servers": ctx.bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "stores.counts.factory": "rocksdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "json",
        "stores.counts.changelog": f"kafka.{name}-counts-changelog",
        "job.logged.store.base.dir": str(state),
        "bench.timing.file": str(timing),
    }


def millpond_dump(config: Path, logdir: Path) -> dict[str, Any]:
    out = subprocess.run([MILLPOND, "store", "dump", "--config", str(config), "--store", "counts"],
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"millpond store dump failed: {out.stderr[-2000:]}")
    counts: dict[str, Any] = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        counts[row["key"]] = row["value"]
    return counts


def large_restore_config(ctx: Ctx, name: str, partitions: int) -> Path:
    """A job config whose ``big`` store (string keys and values) has a changelog to restore."""
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    props = {
        "job.name": name,
        "task.class": "benchmarks.jobs.BenchCounter",
        "task.inputs": f"kafka.{name}-unused-input",
        "task.processing.guarantee": "at-least-once",
        "systems.kafka.bootstrap.servers": ctx.bootstrap,
        "stores.counts.factory": "rocksdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "string",
        "stores.counts.changelog": f"kafka.{name}-counts-changelog",
        "job.logged.store.base.dir": str(run_dir / "state"),
    }
    config = run_dir / "job.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return config


class Scraper(threading.Thread):
    """GETs a job's /metrics every ``every`` seconds (as Prometheus would) until stopped."""

    def __init__(self, url: str, every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.url, self.every = url, every
        self.scrapes = 0
        self.last_bytes = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.last_bytes = len(response.read())
                self.scrapes += 1
            except OSError:
                pass  # not serving yet (start-up) or already gone
            self.done.wait(self.every if self.scrapes else 0.1)

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=10)


class QueryLoad:
    """benchmarks/query_driver.py in its own process: paced gets of a job's query endpoint
    while the job runs (its CPU is the driver's, not the job's)."""

    def __init__(self, url: str, out: Path, rate: float, users: int, partitions: int,
                 connections: int, logdir: Path, phase_s: float = 0.0,
                 off_first: bool = False) -> None:
        self.out, self.rate = out, rate
        self.log = open(logdir / "query-driver.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.query_driver", "--url", url,
             "--users", str(users), "--partitions", str(partitions), "--rate", str(rate),
             "--connections", str(connections), "--phase-s", str(phase_s), "--out", str(out),
             *(["--off-first"] if off_first else [])],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> dict[str, Any] | None:
        """Stop the driver (bounded wait) and read what it wrote (None: it wrote nothing)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()
        return json.loads(self.out.read_text()) if self.out.exists() else None


def query_figures(driven: dict[str, Any], began: float | None,
                  ended: float, messages: int | None = None) -> dict[str, Any]:
    """The driver's figures over the job's processing (first message to exit): requests
    sent and answered (200) per second, answered latency p50/p99, statuses, driver CPU;
    with on/off phases, the job's msg/s in each and the loss (query_driver.phase_rates)."""
    window = ended - began if began is not None and ended > began else 0.0
    rows = [(t, ms, st) for t, ms, st in zip(driven["sent"], driven["latency_ms"],
                                             driven["status"], strict=True)
            if began is not None and began <= t < ended]
    ok = sorted(ms for _, ms, st in rows if st == 200)
    statuses: dict[str, int] = {}
    for *_, st in rows:
        statuses[str(st)] = statuses.get(str(st), 0) + 1

    def pct(q: float) -> float | None:
        return ok[min(len(ok) - 1, int(q * len(ok)))] if ok else None

    return {"rate": driven["rate"], "connections": driven["connections"],
            "routed_share": driven["routed_share"], "window_s": window,
            "sent": len(rows), "answered": len(ok), "statuses": statuses,
            "answered_all_run": sum(1 for st in driven["status"] if st == 200),
            "skipped": driven["skipped"],
            "queries_per_s": len(ok) / window if window else None,
            "query_p50_ms": pct(0.50), "query_p99_ms": pct(0.99),
            "query_mean_ms": statistics.fmean(ok) if ok else None,
            "driver_cpu_s": driven["cpu_s"],
            "driver_wall_s": driven["stopped"] - driven["started"],
            "phase_s": driven.get("phase_s") or 0,
            "phases": (phase_rates(driven.get("marks") or [], messages)
                       if driven.get("phase_s") else None)}


def millpond_count(ctx: Ctx, topic: str, messages: int, guarantee: str, tag: str,
                   reference: dict[str, int], metrics: bool = False,
                   backups: dict[str, str] | None = None, app: str | None = None,
                   output: str | None = None, dlq: bool = False,
                   queries: dict[str, Any] | None = None,
                   default_commit: bool = False) -> dict[str, Any]:
    """One verified ``millpond run --bounded`` count; ``metrics`` turns the Prometheus
    reporter on and scrapes it every second while the job runs; ``backups`` are
    ``job.state.backup.*`` properties (state snapshots uploaded while it runs); ``dlq`` sets
    ``task.dlq.stream`` (a dead-letter topic, which turns the record undo journal on: each
    record's store writes noted, to be undone if it were skipped; no record fails, so the
    count is still exact and the topic is never written); ``queries`` ({"rate", "users",
    "partitions", "connections"}) sets ``job.query.address`` and runs a QueryLoad of ``rate`` gets/s of the
    ``counts`` store while the job runs (issue #33); ``app``
    runs the dataflow ``benchmarks.jobs:<app>`` instead of the StreamTask (``output``: the
    topic its ``to`` writes); ``default_commit`` leaves ``task.commit.ms`` unset (the
    guarantee's default: 100 ms under exactly-once)."""
    name = f"mpb-{ctx.salt}-{SHORT[guarantee]}-{tag}"
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    timing = run_dir / "timing.json"
    config = run_dir / "job.properties"
    props = millpond_props(ctx, name, topic, guarantee, run_dir / "state", timing, app, output)
    scraper = None
    if metrics:
        port = free_port()
        props.update({"metrics.reporters": "prometheus",
                      "metrics.reporter.prometheus.port": port})
        scraper = Scraper(f"http://127.0.0.1:{port}/metrics")
        scraper.start()
    if backups:
        props.update(backups)
        props["job.state.backup.uri"] = f"{backups['job.state.backup.uri']}/{name}"
    if dlq:
        props["task.dlq.stream"] = f"kafka.{name}-dlq"
    if default_commit:
        del props["task.commit.ms"]
    load = None
    if queries:
        port = free_port()
        props["job.query.address"] = f"127.0.0.1:{port}"
        load = QueryLoad(f"http://127.0.0.1:{port}", run_dir / "queries.json",
                         queries["rate"], queries["users"], queries["partitions"],
                         queries["connections"], run_dir, queries.get("phase_s", 0.0),
                         queries.get("off_first", False))
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    driven = None
    try:
        child = run_child([MILLPOND, "run", "--config", str(config), "--bounded"],
                          timeout=ctx.timeout, logdir=run_dir, name="run")
    finally:
        if scraper is not None:
            scraper.stop()
        if load is not None:
            driven = load.stop()
    result: dict[str, Any] = {"system": "millpond", "guarantee": guarantee, "job": name,
                              "config": str(config), "messages": messages,
                              "app": app or "BenchCounter (StreamTask)"}
    if dlq:
        result["dlq_stream"] = props["task.dlq.stream"]
    result["commit_ms"] = props.get("task.commit.ms", "default")
    if scraper is not None:
        result["metrics"] = {"reporter": "prometheus", "scrape_every_s": scraper.every,
                             "scrapes": scraper.scrapes, "last_scrape_bytes": scraper.last_bytes}
    result.update(_child_fields(child))
    if child.returncode != 0:
        return {**result, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    if scraper is not None and not scraper.scrapes:
        return {**result, "ok": False, "error": "the job's /metrics was never scraped"}
    if load is not None and driven is None:
        return {**result, "ok": False, "error": "the query driver wrote nothing; see "
                                                f"{run_dir / 'query-driver.log'}"}
    if backups:
        from millpond.backup import BackupLocation
        from millpond.config import Config

        location = BackupLocation.from_config(Config.load(config))
        result["snapshots"] = sum(len(location.snapshots("counts", p)) for p in range(16))
        result["backup_interval_ms"] = int(backups.get("job.state.backup.interval.ms", 60000))
        if not result["snapshots"]:
            return {**result, "ok": False, "error": "the job uploaded no snapshot"}
    marks = json.loads(timing.read_text()) if timing.exists() else {}
    if "marker" in marks:
        result["first_message_marker"] = marks["marker"]
    result.update(_rates(messages, child.started, marks.get("first_message"), child.exited))
    result["first_message_at"], result["exited_at"] = marks.get("first_message"), child.exited
    if driven is not None:
        result["queries"] = figures = query_figures(driven, marks.get("first_message"),
                                                    child.exited, messages)
        result.update({k: figures[k] for k in ("queries_per_s", "query_p50_ms",
                                               "query_p99_ms", "driver_cpu_s")})
        if not figures["answered_all_run"]:
            return {**result, "ok": False, "error": "no query was answered"}
    result["end_of_stream_s"] = ((marks["end_of_stream"] - marks["first_message"])
                                 if marks.get("end_of_stream") and marks.get("first_message")
                                 else None)
    result.update(compare(millpond_dump(config, run_dir), reference))
    result["ok"] = True
    return result


def millpond_restore(ctx: Ctx, config: Path, tag: str, reference: dict[str, Any]) -> dict[str, Any]:
    run_dir = config.parent
    child = run_child([MILLPOND, "restore", "--config", str(config), "--full"],
                      timeout=ctx.timeout, logdir=run_dir, name=f"restore-{tag}")
    result: dict[str, Any] = {"system": "millpond", "config": str(config)}
    result.update(_child_fields(child))
    if child.returncode != 0:
        return {**result, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    rows = restore_rows(child.stdout)
    records = sum(r["records"] for r in rows)
    restore_s = sum(r["seconds"] for r in rows)
    result.update({"partitions": rows, "records": records, "restore_s": restore_s,
                   "value_bytes": sum(r["value_bytes"] for r in rows),
                   "records_per_s": records / restore_s if restore_s else None,
                   "records_per_s_wall": records / child.wall_s})
    result.update(compare(millpond_dump(config, run_dir), reference))
    result["ok"] = True
    return result


def restore_rows(stdout: str) -> list[dict[str, Any]]:
    """The per store-partition rows of ``millpond restore``'s table."""
    rows = []
    for line in stdout.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8:
            rows.append({"store": parts[0], "partition": int(parts[1]), "records": int(parts[2]),
                         "value_bytes": int(parts[3]), "seconds": float(parts[4])})
    return rows


def _child_fields(child: Child) -> dict[str, Any]:
    return {"returncode": child.returncode, "process_wall_s": child.wall_s,
            "cpu_s": child.cpu_s, "maxrss_mb": child.maxrss_mb, "timed_out": child.timed_out,
            "load_average_before": child.load_before, "cpu_steal_percent": child.steal_percent,
            "cpu_pressure_percent": child.pressure_percent}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- peers ---------------------------------------------------------------------------------
def ensure_peer(name: str, install: bool) -> tuple[bool, str]:
    """Whether the peer's virtualenv imports; installs it from PyPI first when allowed."""
    python = venv_python(name)
    log = VENVS / f"{name}-install.log"

    def imports() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), "-c", f"import {PEER_IMPORT[name]}"],
                              capture_output=True, text=True, timeout=120)

    if python.exists() and imports().returncode == 0:
        return True, "ready"
    if not install:
        return False, f"{python} is missing or cannot import {PEER_IMPORT[name]} (--no-install)"
    VENVS.mkdir(parents=True, exist_ok=True)
    steps = [["python3", "-m", "venv", str(VENVS / name)],
             [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
             [str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES[name]]]
    with open(log, "w") as f:
        for step in steps:
            done = subprocess.run(step, stdout=f, stderr=subprocess.STDOUT, timeout=1200,
                                  env=env_without_venv())
            if done.returncode != 0:
                return False, f"`{' '.join(step)}` failed (exit {done.returncode}); see {log}"
    check = imports()
    if check.returncode != 0:
        return False, f"installed but `import {PEER_IMPORT[name]}` fails: {check.stderr[-500:]}"
    return True, "installed"


def _peer(ctx: Ctx, peer: str, mode: str, spec: dict[str, Any], run_dir: Path,
          tag: str) -> tuple[Child, dict[str, Any]]:
    spec = {**spec, "out": str(run_dir / f"{mode}-{tag}.json")}
    spec_path = run_dir / f"{mode}-{tag}.spec.json"
    spec_path.write_text(json.dumps(spec))
    Path(spec["out"]).unlink(missing_ok=True)
    script = PEERS / f"{peer}_count.py"
    child = run_child([str(venv_python(peer)), str(script), mode, str(spec_path)],
                      cwd=run_dir, timeout=ctx.timeout, logdir=run_dir, name=f"{mode}-{tag}",
                      env={"PYTHONWARNINGS": "ignore"})
    out = json.loads(Path(spec["out"]).read_text()) if Path(spec["out"]).exists() else {}
    return child, out


def quix_spec(ctx: Ctx, topic: str, messages: int, guarantee: str, tag: str) -> dict[str, Any]:
    group = f"qxb-{ctx.salt}-{SHORT[guarantee]}-{tag}"
    run_dir = ctx.work / group
    run_dir.mkdir(parents=True, exist_ok=True)
    return {"bootstrap": ctx.bootstrap, "topic": topic, "group": group,
            "state_dir": str(run_dir / "state"), "guarantee": guarantee, "messages": messages,
            "commit_interval": ctx.commit_s, "run_dir": str(run_dir)}


def quix_count(ctx: Ctx, topic: str, messages: int, guarantee: str, tag: str,
               reference: dict[str, int]) -> dict[str, Any]:
    spec = quix_spec(ctx, topic, messages, guarantee, tag)
    run_dir = Path(spec["run_dir"])
    child, out = _peer(ctx, "quix", "count", spec, run_dir, "run")
    result: dict[str, Any] = {"system": "quix", "guarantee": guarantee, "group": spec["group"],
                              "spec": spec, "messages": messages}
    result.update(_child_fields(child))
    if child.returncode != 0 or not out:
        return {**result, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    result.update(_rates(messages, child.started, out.get("first_message"), out["ended"]))
    result["in_process_cpu_s"] = out.get("cpu_s")
    result["versions"] = out.get("versions")  # as the peer's own interpreter reports them
    result.update(compare(quix_dump(ctx, spec, run_dir), reference))
    result["ok"] = True
    return result


def quix_dump(ctx: Ctx, spec: dict[str, Any], run_dir: Path) -> dict[str, int]:
    child, out = _peer(ctx, "quix", "dump", spec, run_dir, "dump")
    if child.returncode != 0 or "counts" not in out:
        raise RuntimeError(f"quix state dump failed: {child.tail()}")
    return out["counts"]


def quix_recover(ctx: Ctx, spec: dict[str, Any], tag: str,
                 reference: dict[str, int]) -> dict[str, Any]:
    """Delete the Quix app's local state and time its recovery from the changelog."""
    run_dir = Path(spec["run_dir"])
    shutil.rmtree(spec["state_dir"], ignore_errors=True)
    child, out = _peer(ctx, "quix", "recover", spec, run_dir, f"recover-{tag}")
    result: dict[str, Any] = {"system": "quix", "group": spec["group"]}
    result.update(_child_fields(child))
    if child.returncode != 0 or not out.get("recovery_done"):
        return {**result, "ok": False, "error": f"exit {child.returncode}: {out} {child.tail()}"}
    result.update({"restore_s": out["recovery_done"] - out["recovery_began"],
                   "wall_to_done_s": out["recovery_done"] - child.started,
                   "recoveries": out.get("recoveries"), "versions": out.get("versions")})
    result.update(compare(quix_dump(ctx, spec, run_dir), reference))
    result["ok"] = True
    return result


def faust_count(ctx: Ctx, topic: str, messages: int, partitions: int, tag: str,
                reference: dict[str, int], settings: dict[str, Any] | None = None,
                ) -> dict[str, Any]:
    group = f"fsb-{ctx.salt}-alo-{tag}"
    run_dir = ctx.work / group
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"bootstrap": ctx.bootstrap, "topic": topic, "group": group,
            "state_dir": str(run_dir / "state"), "guarantee": "at_least_once",
            "messages": messages, "partitions": partitions, "commit_interval": ctx.commit_s,
            "settings": settings or {}}
    child, out = _peer(ctx, "faust", "count", spec, run_dir, "run")
    result: dict[str, Any] = {"system": "faust", "guarantee": "at-least-once", "group": group,
                              "spec": spec, "messages": messages}
    result.update(_child_fields(child))
    if not out or out.get("processed") != messages:
        return {**result, "ok": False,
                "error": f"exit {child.returncode}, processed {out.get('processed')}: "
                         f"{child.tail()}"}
    end = out.get("stopped") or out["ended"]
    result["versions"] = out.get("versions")
    result.update(_rates(messages, child.started, out.get("first_message"), end))
    result["last_message_s"] = ((out["last_message"] - out["first_message"])
                                if out.get("last_message") and out.get("first_message")
                                else None)
    d_child, d_out = _peer(ctx, "faust", "dump", spec, run_dir, "dump")
    if d_child.returncode != 0 or "counts" not in d_out:
        return {**result, "ok": False, "error": f"faust dump failed: {d_child.tail()}"}
    result.update(compare(d_out["counts"], reference))
    result["ok"] = True
    return result


def _peer_run_figures(result: dict[str, Any], messages: int, child: Child,
                      out: dict[str, Any]) -> None:
    """Into ``result``, the figures of a Bytewax or Pathway count run from its own report
    ``out``: the rates (its first message to its end), its in-process CPU, the versions it
    ran with and its peak RSS. Their peak can come after the harness's last VmHWM poll
    (which missed ~0.5 GB of Bytewax's in a 2M run; Pathway's final batch and snapshot come
    at the end of its run): the larger of the polled peak and its own getrusage at its end."""
    result.update(_rates(messages, child.started, out.get("first_message"), out["ended"]))
    result["in_process_cpu_s"] = out.get("cpu_s")
    result["maxrss_mb_polled"] = result["maxrss_mb"]
    result["maxrss_mb"] = max(result["maxrss_mb"], out.get("maxrss_mb") or 0.0)
    result["versions"] = out.get("versions")


def bytewax_count(ctx: Ctx, topic: str, messages: int, tag: str,
                  reference: dict[str, int]) -> dict[str, Any]:
    """One verified Bytewax count (``peers/bytewax_count.py``: key_on user_id -> stateful_map,
    recovery on with an epoch per commit interval); its counts are read back from the
    recovery partitions' snapshots."""
    name = f"bwb-{ctx.salt}-{tag}"
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"bootstrap": ctx.bootstrap, "topic": topic,
            "recovery_dir": str(run_dir / "state" / "recovery"), "partitions": 1,
            "epoch_interval": ctx.commit_s, "messages": messages}
    child, out = _peer(ctx, "bytewax", "count", spec, run_dir, "run")
    result: dict[str, Any] = {"system": "bytewax", "guarantee": "recovery on", "group": name,
                              "spec": spec, "messages": messages}
    result.update(_child_fields(child))
    if child.returncode != 0 or not out:
        return {**result, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    _peer_run_figures(result, messages, child, out)
    d_child, d_out = _peer(ctx, "bytewax", "dump", spec, run_dir, "dump")
    if d_child.returncode != 0 or "counts" not in d_out:
        return {**result, "ok": False, "error": f"bytewax dump failed: {d_child.tail()}"}
    result["snapshot_epochs"] = len(d_out.get("epochs") or [])
    result.update(compare(d_out["counts"], reference))
    result["ok"] = True
    return result


def pathway_count(ctx: Ctx, topic: str, messages: int, tag: str,
                  reference: dict[str, int]) -> dict[str, Any]:
    """One verified Pathway count (``peers/pathway_count.py``: kafka.read in static mode ->
    groupby(user_id).reduce(count) -> jsonlines, persistence on with a snapshot every commit
    interval); its counts are the output file's update rows replayed (``dump``, not timed).
    ``first_message`` is when its Kafka connector starts reading (the script's docstring
    says why and how); a run without that mark fails rather than report no rate."""
    name = f"pwb-{ctx.salt}-{tag}"
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"bootstrap": ctx.bootstrap, "topic": topic, "group": name,
            "state_dir": str(run_dir / "state" / "persistence"),
            "output": str(run_dir / "state" / "counts.jsonl"),
            "snapshot_interval_ms": int(ctx.commit_s * 1000), "messages": messages}
    child, out = _peer(ctx, "pathway", "count", spec, run_dir, "run")
    result: dict[str, Any] = {"system": "pathway", "guarantee": "static, persistence on",
                              "group": name, "spec": spec, "messages": messages}
    result.update(_child_fields(child))
    if child.returncode != 0 or not out:
        return {**result, "ok": False, "error": f"exit {child.returncode}: {child.tail()}"}
    if out.get("first_message") is None:
        return {**result, "ok": False, "error": "Pathway logged no start of its Kafka read "
                                                f"(the first-message mark): {child.tail()}"}
    _peer_run_figures(result, messages, child, out)
    result["first_message_marker"] = out.get("first_message_marker")
    result["graph_built_s"] = out["graph_built"] - child.started
    result["exit_after_end_s"] = child.exited - out["ended"]
    d_child, d_out = _peer(ctx, "pathway", "dump", spec, run_dir, "dump")
    if d_child.returncode != 0 or "counts" not in d_out:
        return {**result, "ok": False, "error": f"pathway dump failed: {d_child.tail()}"}
    result.update({"output_rows": d_out.get("rows"), "retractions": d_out.get("retractions"),
                   "inconsistent_keys": d_out.get("inconsistent"),
                   "inconsistent_examples": d_out.get("inconsistent_examples")})
    result.update(compare(d_out["counts"], reference))
    result["ok"] = True
    return result


def cleanup_dirs(work: Path) -> None:
    """Remove the run directories' RocksDB state (keeps logs and configs)."""
    for state in work.glob("*/state"):
        shutil.rmtree(state, ignore_errors=True)


def env_without_venv() -> dict[str, str]:
    """The environment minus this virtualenv, so ``python3`` is the system interpreter."""
    env = dict(os.environ)
    venv = env.pop("VIRTUAL_ENV", None)
    if venv:
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                      if not p.startswith(venv))
    return env

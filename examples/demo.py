"""The recovery demo (``make demo``): hourly page views survive a SIGKILL and a lost store.

Runs example 1 (``config/hourly-page-views.properties``) on the local broker under names unique
to this run:

1. generates 60,000 page views (seeded), produces half of them;
2. starts ``millpond run`` and, while the other half streams in, SIGKILLs it;
3. deletes one task's RocksDB directory, as a lost disk would;
4. ``millpond restore`` rebuilds the stores from their changelogs (progress per partition);
5. restarts the job, which resumes from its checkpoints and runs to the end of the input;
6. compares the per-user counts (emitted closed hours + hours still open in the store) with a
   plain-Python count of the same views, and, when ``millpond spark audit`` is available,
   audits the local store against its changelog with Spark.

The last line is the verdict, ``demo: PASS ...`` or ``demo: FAIL ...`` (exit code 1).

Options (``make demo`` uses none of them): ``--bootstrap HOST:PORT`` runs it against another
broker (default 127.0.0.1:9092, the one ``make kafka-up`` starts), ``--state-dir DIR`` puts the
stores there instead of ``state/``, and ``--no-spark-audit`` skips step 6's Spark audit (the
test of the demo uses all three). Every run uses topic, job and state names of its own, and
removes them when it passes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from examples.generate import BOOTSTRAP, create_topics, page_views, produce
from examples.reference import HourlyResult, hourly_counts

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "hourly-page-views.properties"
MILLPOND = str(Path(sys.executable).with_name("millpond"))
EVENTS, USERS, HOURS, PARTITIONS, SEED = 60_000, 40, 8, 4, 7
LOST_PARTITION = 2
SHOWN = ("assigned partitions", "ready:", "status:", "re-wrote", "restor", "Traceback", "Error",
         "metrics at")


STARTED: list[subprocess.Popen[str]] = []  # job processes, killed if the demo fails


class DemoFailed(Exception):
    pass


@dataclass(frozen=True)
class Settings:
    """Where the demo runs: the broker, the stores' base directory, and whether to audit."""

    bootstrap: str = BOOTSTRAP
    state_dir: Path = REPO / "state"
    spark_audit: bool = True
    metrics_port: int | None = None  # serve Prometheus metrics from the job on this port
    metrics_host: str = "127.0.0.1"


def shown(path: Path) -> Path:
    """``path`` relative to the repository when it is inside it (shorter to print)."""
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def step(n: int, text: str) -> None:
    print(f"\n[{n}/6] {text}", flush=True)


class Job:
    """``millpond run`` as a subprocess with the demo's overrides; echoes the log's key lines."""

    def __init__(self, overrides: list[str], bounded: bool) -> None:
        args = [MILLPOND, "run", "--config", str(CONFIG), *overrides]
        self.proc = subprocess.Popen(args + (["--bounded"] if bounded else []), cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        STARTED.append(self.proc)
        self.lines: list[str] = []
        self.pump = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self.pump.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)
            if any(s in line for s in SHOWN):
                message = line.split(": ", 1)[-1].rstrip()
                print(f"      job | {message[:150]}", flush=True)

    def wait_for(self, needle: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while sum(needle in line for line in self.lines) < count:
            if self.proc.poll() is not None:
                raise DemoFailed(f"the job exited with {self.proc.returncode}:\n"
                                 + "".join(self.lines[-20:]))
            if time.monotonic() > deadline:
                raise DemoFailed(f"no {count}x {needle!r} from the job within {timeout:.0f} s")
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.pump.join(timeout=5)

    def finish(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise DemoFailed(f"the restarted job did not finish within {timeout:.0f} s") from None
        self.pump.join(timeout=5)
        if self.proc.returncode != 0:
            raise DemoFailed(f"the restarted job exited with {self.proc.returncode}:\n"
                             + "".join(self.lines[-20:]))


def millpond(*args: str, timeout: float = 120, capture: bool = True
             ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # keep its output in order with ours
    return subprocess.run([MILLPOND, *args], cwd=REPO, text=True, timeout=timeout,
                          capture_output=capture, env=env)


def check_broker(bootstrap: str) -> None:
    from millpond.kafka import clients

    try:
        clients.admin({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    except Exception as exc:
        raise DemoFailed(f"no Kafka broker at {bootstrap} ({exc}); start one with "
                         "`make kafka-up` or `millpond dev kafka start`") from None


def paced(records: list[Any], chunk: int = 1000, pause: float = 0.15) -> Iterator[Any]:
    """``records``, pausing after every ``chunk`` of them: input that is still arriving."""
    for i, record in enumerate(records, 1):
        yield record
        if i % chunk == 0:
            time.sleep(pause)


def committed(config: list[str]) -> dict[str, int]:
    out = millpond("checkpoint", "show", "--config", str(CONFIG), *config, "--format", "json")
    if out.returncode != 0:
        raise DemoFailed(f"millpond checkpoint show failed: {out.stderr}")
    return {task: sum(c["inputs"].values()) for task, c in json.loads(out.stdout or "{}").items()}


def read_outputs(bootstrap: str, topic: str) -> dict[str, int]:
    """The emitted hourly counts, deduplicated by key (copies of a key must agree)."""
    from confluent_kafka import KafkaError, TopicPartition

    from millpond.kafka import clients

    consumer = clients.consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    remaining, copies = set(range(PARTITIONS)), 0
    out: dict[str, int] = {}
    deadline = time.monotonic() + 30
    try:
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition())
                    continue
                raise DemoFailed(f"reading {topic}: {err}")
            key, views = (msg.key() or b"").decode(), json.loads(msg.value() or b"{}")["views"]
            if key in out:
                copies += 1
                if out[key] != views:
                    raise DemoFailed(f"{key} was emitted as {out[key]} and as {views}")
            out[key] = views
    finally:
        consumer.close()
    if remaining:
        raise DemoFailed(f"could not read {topic} to its end")
    if copies:
        print(f"      {copies} hourly counts were re-sent after the kill (at-least-once output, "
              "identical copies)")
    return out


def compare(expected: HourlyResult, emitted: dict[str, int], stored: dict[str, int]) -> list[str]:
    """Print per-user totals next to the expected ones; return what differs."""
    problems = []
    if emitted != expected.closed:
        diff = {k for k in emitted.keys() | expected.closed.keys()
                if emitted.get(k) != expected.closed.get(k)}
        problems.append(f"{len(diff)} closed (hour, user) counts differ, e.g. {sorted(diff)[:3]}")
    if stored != expected.open:
        diff = {k for k in stored.keys() | expected.open.keys()
                if stored.get(k) != expected.open.get(k)}
        problems.append(f"{len(diff)} open (hour, user) counts differ, e.g. {sorted(diff)[:3]}")
    job_total: Counter[str] = Counter()
    for key, n in (*emitted.items(), *stored.items()):
        job_total[key.split("|", 1)[1]] += n
    want = expected.per_user()
    users = sorted(want.keys() | job_total.keys(), key=lambda u: (-want[u], u))
    print(f"      {'user':<10} {'job':>6} {'expected':>9}      "
          f"{'user':<10} {'job':>6} {'expected':>9}")
    rows = [f"{u:<10} {job_total[u]:>6} {want[u]:>9} {'ok' if job_total[u] == want[u] else 'XX'}"
            for u in users]
    half = (len(rows) + 1) // 2
    for left, right in zip(rows[:half], rows[half:] + [""] * (2 * half - len(rows)),
                           strict=True):
        print(f"      {left:<30}   {right}")
    bad = [u for u in users if job_total[u] != want[u]]
    if bad:
        problems.append(f"per-user totals differ for {bad[:5]}")
    print(f"      {len(users) - len(bad)}/{len(users)} users match; {len(emitted)} closed "
          f"(hour, user) counts emitted, {len(stored)} still open in the store, "
          f"{expected.late} late views dropped")
    return problems


def spark_audit(config: list[str]) -> str | None:
    """Run ``millpond spark audit`` if this millpond has it; None if not, else its summary."""
    probe = millpond("spark", "--help", timeout=60)
    if probe.returncode != 0 or "audit" not in probe.stdout:
        return None
    out = millpond("spark", "audit", "--config", str(CONFIG), *config, "--store",
                   "hourly-counts", timeout=170)
    return audit_summary(out.returncode, out.stdout, out.stderr)


def audit_summary(code: int, stdout: str, stderr: str = "") -> str:
    """The summary of ``millpond spark audit``'s JSON report (its stdout, nothing else):
    ``68 keys match the changelog (0 missing, 0 extra, 0 differing)``. Raises DemoFailed
    when the audit could not run (exit 2), found a divergence (exit 1) or printed no report."""
    if code not in (0, 1):
        raise DemoFailed(f"spark audit exited {code}:\n{stdout[-2000:]}{stderr[-2000:]}")
    try:
        report: dict[str, Any] = json.loads(stdout)
        totals = {k: int(report["totals"][k]) for k in ("matching", "missing", "extra",
                                                         "differing")}
    except (ValueError, KeyError, TypeError):
        raise DemoFailed("spark audit printed no JSON report on stdout:\n"
                         f"{stdout[-2000:]}{stderr[-2000:]}") from None
    summary = (f"{totals['matching']} keys match the changelog ({totals['missing']} missing, "
               f"{totals['extra']} extra, {totals['differing']} differing)")
    if code != 0 or report.get("ok") is not True:
        raise DemoFailed(f"spark audit found the store and its changelog differ: {summary}")
    return summary


def cleanup(bootstrap: str, run_id: str, state: Path) -> None:
    from millpond.kafka import clients

    admin = clients.admin({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if run_id in t]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception:
                pass
    shutil.rmtree(state, ignore_errors=True)


def run(run_id: str, settings: Settings) -> str:
    began = time.monotonic()
    bootstrap = settings.bootstrap
    job_name = f"demo-hourly-page-views-{run_id}"
    views_topic, out_topic = f"demo-page-views-{run_id}", f"demo-hourly-page-views-out-{run_id}"
    config = [f"--config-override={kv}" for kv in (
        f"job.name={job_name}", f"task.inputs=kafka.{views_topic}",
        f"output.stream=kafka.{out_topic}",
        f"stores.hourly-counts.changelog=kafka.{job_name}-hourly-counts-changelog",
        f"stores.event-time.changelog=kafka.{job_name}-event-time-changelog",
        f"systems.kafka.consumer.group.instance.id={job_name}-1",
        f"systems.kafka.bootstrap.servers={bootstrap}",
        f"job.logged.store.base.dir={settings.state_dir}",
        "task.commit.ms=500",
    )]
    if settings.metrics_port is not None:
        config += [f"--config-override={kv}" for kv in (
            "metrics.reporters=prometheus",
            f"metrics.reporter.prometheus.port={settings.metrics_port}",
            f"metrics.reporter.prometheus.host={settings.metrics_host}")]
    state = settings.state_dir / job_name

    step(1, f"generating {EVENTS:,} page views of {USERS} users over {HOURS} h "
            f"(seed {SEED}) into {views_topic} ({PARTITIONS} partitions)")
    check_broker(bootstrap)
    views = page_views(SEED, EVENTS, USERS, HOURS, partitions=PARTITIONS)
    create_topics(bootstrap, {views_topic: PARTITIONS, out_topic: PARTITIONS})
    half = len(views) // 2
    produce(bootstrap, views_topic, views[:half])
    print(f"      produced the first {half:,}; job {job_name}, config {CONFIG.relative_to(REPO)}")

    step(2, "running the job, producing the other half meanwhile, then SIGKILL")
    job = Job(config, bounded=False)
    job.wait_for("ready:", PARTITIONS, timeout=60)
    feeder = threading.Thread(target=produce, daemon=True,
                              args=(bootstrap, views_topic, paced(views[half:])))
    feeder.start()
    time.sleep(2.5)  # a few commits (task.commit.ms=500); the feeder needs ~4.5 s in all
    job.kill()
    done = committed(config)
    total_done = sum(done.values())
    print(f"      killed pid {job.proc.pid} with SIGKILL; its last checkpoints cover "
          f"{total_done:,} of {EVENTS:,} views ({', '.join(f'{t} {n:,}' for t, n in done.items())})")
    if not 0 < total_done < EVENTS:
        raise DemoFailed(f"the kill did not land mid-stream ({total_done} views committed)")
    feeder.join(timeout=60)

    step(3, f"deleting task partition-{LOST_PARTITION}'s store directory (a lost disk)")
    lost = sorted((state / "hourly-counts").glob(f"partition-{LOST_PARTITION}*"))
    for path in lost:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        print(f"      rm -r {shown(path)}")
    if not lost:
        raise DemoFailed(f"no store directory for partition {LOST_PARTITION} under {state}")

    step(4, "millpond restore: rebuilding the stores from their changelogs")
    print(f"      $ millpond restore --config {CONFIG.relative_to(REPO)} ...", flush=True)
    restored = millpond("restore", "--config", str(CONFIG), *config, capture=False, timeout=120)
    if restored.returncode != 0:
        raise DemoFailed("millpond restore failed")

    step(5, "restarting the job; it resumes from its checkpoints and runs to the end")
    again = Job(config, bounded=True)
    again.finish(timeout=120)

    step(6, "comparing with a plain-Python count of the same views")
    expected = hourly_counts(views)
    emitted = read_outputs(bootstrap, out_topic)
    out = millpond("store", "dump", "--config", str(CONFIG), *config, "--store", "hourly-counts")
    if out.returncode != 0:
        raise DemoFailed(f"millpond store dump failed: {out.stderr}")
    stored = {row["key"]: row["value"] for row in map(json.loads, out.stdout.splitlines())}
    problems = compare(expected, emitted, stored)
    if problems:
        raise DemoFailed("; ".join(problems))

    audit = spark_audit(config) if settings.spark_audit else None
    if not settings.spark_audit:
        audit_note = "spark audit skipped (--no-spark-audit)"
        print("      (millpond spark audit skipped: --no-spark-audit)")
    elif audit is None:
        audit_note = "spark audit not available"
        print("      (millpond spark audit is not available in this millpond; skipped)")
    else:
        audit_note = f"spark audit ok: {audit}"
        print(f"      millpond spark audit --store hourly-counts: {audit}")
    cleanup(bootstrap, run_id, state)
    return (f"{len(expected.per_user())}/{len(expected.per_user())} users and "
            f"{len(expected.closed) + len(expected.open)} hourly counts match after SIGKILL + "
            f"lost store + restore; {audit_note}; {time.monotonic() - began:.0f} s")


def parse_args(argv: Sequence[str] | None) -> Settings:
    parser = argparse.ArgumentParser(prog="python -m examples.demo", description=(
        "The recovery demo: hourly page views survive a SIGKILL and a lost store."))
    parser.add_argument("--bootstrap", default=BOOTSTRAP,
                        help=f"the Kafka broker to run against (default {BOOTSTRAP})")
    parser.add_argument("--state-dir", type=Path, default=REPO / "state",
                        help="base directory of the job's stores (default state/)")
    parser.add_argument("--no-spark-audit", action="store_true",
                        help="skip the Spark audit of step 6")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve the job's Prometheus metrics on this port (docker/compose.yml "
                             "scrapes 9404; 0 picks a free port)")
    parser.add_argument("--metrics-host", default="127.0.0.1",
                        help="address the metrics port listens on (0.0.0.0 for the Prometheus "
                             "of docker/compose.yml; default 127.0.0.1)")
    args = parser.parse_args(argv)
    return Settings(bootstrap=args.bootstrap, state_dir=args.state_dir.resolve(),
                    spark_audit=not args.no_spark_audit, metrics_port=args.metrics_port,
                    metrics_host=args.metrics_host)


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse_args(argv)
    # The demo's own Kafka clients log through millpond.kafka: warnings only, labelled.
    logging.basicConfig(level=logging.WARNING, format="      %(levelname)s %(name)s: %(message)s")
    run_id = uuid.uuid4().hex[:6]
    try:
        summary = run(run_id, settings)
    except Exception as exc:  # any failure ends in the verdict line
        state = settings.state_dir / f"demo-hourly-page-views-{run_id}"
        if state.exists():
            print(f"      (left {shown(state)} and the run's topics (*-{run_id}) for a look)")
        reason = str(exc) if isinstance(exc, DemoFailed) else f"{type(exc).__name__}: {exc}"
        print(f"\ndemo: FAIL {reason}")
        sys.exit(1)
    finally:
        for proc in STARTED:  # never leave a job running behind
            if proc.poll() is None:
                proc.kill()
    print(f"\ndemo: PASS {summary}")


if __name__ == "__main__":
    main()

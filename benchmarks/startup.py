"""Start-up: process start -> first record processed, for a bounded job on a tiny topic.

Each round runs ``millpond run --bounded`` as a fresh job (its own name: 4 empty tasks,
their changelogs made by the run) on one 4-partition topic holding a few records, and reads
the phases from the job's log: config loaded (the first log line), partitions assigned, each
task ready, and the first record processed (a line this module's task logs), then the exit.
Reports the median of each phase over the rounds, with the load average before and after.

    .venv/bin/python -m benchmarks.startup [--rounds 10] [--bootstrap 127.0.0.1:9092]
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from millpond import StreamTask

ROOT = Path(__file__).resolve().parent.parent
MILLPOND = str(Path(sys.executable).with_name("millpond"))


class FirstRecord(StreamTask):
    """Counts per key in a store; logs its first record (the benchmark's mark)."""

    def init(self, context: Any) -> None:
        self.counts = context.get_store("counts")
        self.seen = False

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        if not self.seen:
            self.seen = True
            logging.getLogger("millpond.bench").info("first record")
        key = envelope.key
        self.counts.put(key, (self.counts.get(key) or 0) + 1)


TASK_MODULE = "millpond_startup_task"  # written into the work directory (any tree's millpond)


def _properties(job: str, topic: str, bootstrap: str) -> str:
    return "\n".join([
        f"job.name={job}",
        f"task.class={TASK_MODULE}.FirstRecord",
        f"task.inputs=kafka.{topic}",
        "task.commit.ms=5000",
        "task.processing.guarantee=effectively-once",
        f"systems.kafka.bootstrap.servers={bootstrap}",
        "systems.kafka.samza.key.serde=string",
        "systems.kafka.samza.msg.serde=json",
        "stores.counts.factory=rocksdb",
        "stores.counts.key.serde=string",
        "stores.counts.msg.serde=json",
        f"stores.counts.changelog=kafka.{job}-counts-changelog",
        "",
    ])


def _stamp(line: str) -> float | None:
    """The epoch time of a log line's ``%(asctime)s`` (local time, ms)."""
    try:
        parsed = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    except ValueError:
        return None
    return parsed.timestamp()


def run_once(topic: str, bootstrap: str, workdir: Path, tree: Path | None = None
             ) -> dict[str, float]:
    """One bounded run of a fresh job; each phase's seconds since the process started
    (``tree``: a checkout whose ``millpond`` package runs instead of the installed one)."""
    job = f"startup-{uuid.uuid4().hex[:8]}"
    props = workdir / f"{job}.properties"
    props.write_text(_properties(job, topic, bootstrap))
    # This module as the task's (both trees import the same, not the benchmarks package).
    (workdir / f"{TASK_MODULE}.py").write_text(Path(__file__).read_text())
    paths = [str(workdir)] + ([str(tree)] if tree is not None else [str(ROOT)])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    started = time.time()
    proc = subprocess.run(
        [MILLPOND, "run", "--config", str(props), "--bounded",
         "--config-override", f"job.logged.store.base.dir={workdir / job}"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    ended = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"millpond run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    phases: dict[str, float] = {}
    ready: list[float] = []
    for line in proc.stderr.splitlines():
        at = _stamp(line)
        if at is None:
            continue
        phases.setdefault("first log line", at - started)
        if "ACLs in " in line:  # millpond check at start: "checked the job's 16 ACLs in 0.27 s"
            phases["acl check (own)"] = float(line.split("ACLs in ")[1].split()[0])
        elif "assigned partitions" in line:
            phases.setdefault("assigned", at - started)
        elif " ready: restored" in line:
            ready.append(at - started)
        elif "first record" in line:
            phases.setdefault("first record", at - started)
    if ready:
        phases["first task ready"] = ready[0]
        phases["all tasks ready"] = ready[-1]
    phases["exit"] = ended - started
    return phases


def _produce(topic: str, bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(40):
        producer.produce(topic, key=f"user-{i % 10}", value=json.dumps({"n": i}),
                         partition=i % 4)
    producer.flush(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--json", type=Path, help="also write the medians here")
    parser.add_argument("--against", type=Path, metavar="TREE",
                        help="a checkout (e.g. `git archive main millpond | tar -x -C TREE`) "
                             "run alternately with this one, A/B/A/B; both are reported")
    args = parser.parse_args(argv)
    topic = f"startup-input-{uuid.uuid4().hex[:8]}"
    _produce(topic, args.bootstrap)
    load_before = os.getloadavg()
    trees: dict[str, Path | None] = {"this tree": None}
    if args.against is not None:
        trees[str(args.against)] = args.against.resolve()
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="millpond-startup-") as tmp:
        for i in range(args.rounds):
            for name, tree in trees.items():
                phases = run_once(topic, args.bootstrap, Path(tmp), tree)
                rounds[name].append(phases)
                print(f"round {i + 1} ({name}): "
                      + ", ".join(f"{k} {v:.2f}s" for k, v in phases.items()), file=sys.stderr)
    load_after = os.getloadavg()
    print(f"millpond start-up, {args.rounds} rounds, 4 empty tasks; "
          f"load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    medians: dict[str, dict[str, float]] = {}
    for name, runs in rounds.items():
        keys = list(dict.fromkeys(k for r in runs for k in r))
        medians[name] = {k: statistics.median(r[k] for r in runs if k in r) for k in keys}
    for k in medians["this tree"]:
        print(f"  {k:18s} " + "  ".join(f"{name}: {m.get(k, float('nan')):.3f} s"
                                         for name, m in medians.items()))
    if args.json:
        args.json.write_text(json.dumps({"medians": medians, "rounds": rounds,
                                         "load": [load_before, load_after]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

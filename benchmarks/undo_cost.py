"""Before/after cost of issue #35's record undo and restore validation, in one run.

The undo journal's cost on the count job is now measured by ``make bench`` itself, inside
one run of one checkout: the count workload runs millpond effectively-once once more per
round with ``task.dlq.stream`` set (journaling is on only then) beside the same count
without it, and reports the target "undo journal costs <= 3% (CPU s per message)". This
script's ``count`` A/B is kept only for comparing two trees (since the journal went
behind ``task.dlq.stream``, its count journals in neither tree); its ``restore`` figures
(the restore check's decode) and the ``micro`` figures are not in ``make bench``.

Runs the same work with two millpond trees, alternating (before, after, after, before, ...)
so drifting load on a shared machine hits both alike:

* ``count``: the count job (benchmarks.jobs.BenchCounter, ``millpond run --bounded``) on one
  input topic: msg/s from the first message and CPU s per 1M messages (wait4);
* ``restore``: ``millpond restore --full`` of one synthetic changelog partition of JSON
  values (a string key serde and a json msg serde): records/s as restore reports it;
* ``micro`` (this tree only, in process, CPU time): the count's get + put per record on the
  object cache with the record journal off and on, and RecordCheck's decode per restored
  JSON record beside the plain batch it replaces. On a loaded machine the end-to-end figures
  above cannot resolve a few percent; these can.

The "before" tree is a directory holding a ``millpond`` package (e.g. ``git archive
<commit> millpond | tar -x -C DIR``), put first on PYTHONPATH; "after" is this checkout.

    .venv/bin/python -m benchmarks.undo_cost --before DIR --bootstrap 127.0.0.1:9092 \\
        --messages 1000000 --restore-records 1000000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks import data
from benchmarks.common import MILLPOND, load_average, run_child
from benchmarks.systems import Ctx, compare, millpond_dump, millpond_props, restore_rows


def _env(tree: str | None) -> dict[str, str]:
    return {"PYTHONPATH": tree} if tree else {}


def count_once(ctx: Ctx, topic: str, messages: int, tree: str | None, tag: str,
               guarantee: str) -> dict[str, Any]:
    name = f"undo-{ctx.salt}-{tag}"
    run_dir = ctx.work / name
    run_dir.mkdir(parents=True)
    timing = run_dir / "timing.json"
    config = run_dir / "job.properties"
    props = millpond_props(ctx, name, topic, guarantee, run_dir / "state", timing)
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    child = run_child([MILLPOND, "run", "--config", str(config), "--bounded"],
                      env=_env(tree), timeout=ctx.timeout, logdir=run_dir, name="run")
    if child.returncode != 0:
        raise SystemExit(f"count {tag} failed: {child.tail()}")
    marks = json.loads(timing.read_text())
    seconds = child.exited - marks["first_message"]
    checked = compare(millpond_dump(config, run_dir), ctx.reference)
    return {"msgs_per_s": messages / seconds, "cpu_s_per_1m": child.cpu_s * 1e6 / messages,
            "steal_percent": child.steal_percent, "load_before": child.load_before,
            "correct": checked["correct"]}


def changelog(bootstrap: str, topic: str, records: int, keys: int) -> None:
    """``records`` JSON values over ``keys`` string keys into partition 0 of ``topic``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the future resolves
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})]
                        )[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1 << 20, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000})
    for i in range(records):
        k = (i * 7919) % keys
        value = f'{{"seq":{i},"user":{k},"score":{i * 0.5},"pad":"{"x" * 30}"}}'
        while True:
            try:
                producer.produce(topic, key=f"key-{k:010d}".encode(), value=value.encode(),
                                 partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise SystemExit("changelog not delivered")


def restore_once(config: Path, tree: str | None, work: Path, tag: str) -> dict[str, Any]:
    child = run_child([MILLPOND, "restore", "--config", str(config), "--full"],
                      env=_env(tree), timeout=1800, logdir=work, name=f"restore-{tag}")
    if child.returncode != 0:
        raise SystemExit(f"restore {tag} failed: {child.tail()}")
    [row] = restore_rows(child.stdout)
    return {"records_per_s": row["records"] / row["seconds"], "records": row["records"],
            "cpu_s": child.cpu_s, "steal_percent": child.steal_percent,
            "load_before": child.load_before}


def micro(records: int = 1_000_000, rounds: int = 5) -> dict[str, Any]:
    """ns of CPU per record: the count's store path with the journal off/on, and the
    restore check of 1000-record JSON batches (see the module docstring)."""
    from millpond.changelog.restore import RecordCheck, RestoreStats
    from millpond.serdes import JsonSerde, StringSerde
    from millpond.stores import InMemoryEngine, build_stack
    from millpond.stores.undo import RecordJournal

    keys = [f"user-{(i * 7919) % 100_000}" for i in range(records)]

    def count(journal_on: bool) -> float:
        journal = RecordJournal()
        store = build_stack("s", InMemoryEngine(), StringSerde(), JsonSerde(),
                            journal=journal if journal_on else None).store
        entries = journal.start() if journal_on else []
        began = time.process_time()
        for key in keys:
            store.put(key, (store.get(key) or 0) + 1)
            if entries:
                entries.clear()
        return (time.process_time() - began) / records * 1e9

    class Msg:
        def __init__(self, offset: int) -> None:
            self._offset = offset

        def offset(self) -> int:
            return self._offset

    n = 1000
    batch: Any = [Msg(i) for i in range(n)]
    bkeys = [f"key-{(i * 7919) % 100_000:010d}".encode() for i in range(n)]
    bvalues = [f'{{"seq":{i},"user":{i},"score":{i * 0.5},"pad":"{"x" * 30}"}}'.encode()
               for i in range(n)]
    check, stats = RecordCheck(StringSerde(), JsonSerde()), RestoreStats("b", "t", 0, 0, n)

    def restore(checked: bool) -> float:
        began = time.process_time()
        for _ in range(records // n):
            if checked:
                check(stats, batch, bkeys, bvalues)
            else:
                list(zip(bkeys, bvalues, strict=True))
        return (time.process_time() - began) / records * 1e9

    out: dict[str, list[float]] = {"journal_off": [], "journal_on": [], "restore_plain": [],
                                   "restore_checked": []}
    for _ in range(rounds):
        out["journal_off"].append(count(False))
        out["journal_on"].append(count(True))
        out["restore_plain"].append(restore(False))
        out["restore_checked"].append(restore(True))
    medians = {k: statistics.median(v) for k, v in out.items()}
    print(f"micro: count get+put {medians['journal_off']:.0f} ns/record journal off, "
          f"{medians['journal_on']:.0f} on; restore batch {medians['restore_plain']:.0f} "
          f"ns/record plain, {medians['restore_checked']:.0f} checked (CPU time, medians "
          f"of {rounds})", flush=True)
    return {"runs": out, "medians": medians}


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="dir holding the 'before' millpond package")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--guarantee", default="effectively-once")
    p.add_argument("--restore-records", type=int, default=1_000_000)
    p.add_argument("--restore-keys", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", choices=("count", "restore", "micro"), action="append")
    a = p.parse_args()
    only = set(a.only or ("count", "restore", "micro"))
    salt = f"{int(time.time())}-{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="undo-cost-"))
    ctx = Ctx(a.bootstrap, salt, work, 5.0)
    trees = {"before": a.before, "after": None}
    out: dict[str, Any] = {"load_at_start": load_average(), "args": vars(a)}
    if "count" in only:
        dataset = data.make_dataset(a.messages, a.users, a.partitions)
        ctx.reference = dataset.reference()
        topic = f"undo-cost-input-{salt}"
        data.create_topic(a.bootstrap, topic, a.partitions)
        data.produce(a.bootstrap, topic, dataset)
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for r in range(a.runs):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                res = count_once(ctx, topic, a.messages, trees[which], f"{which}{r}",
                                 a.guarantee)
                runs[which].append(res)
                print(f"count {which} run {r + 1}: {res['msgs_per_s']:,.0f} msg/s, "
                      f"{res['cpu_s_per_1m']:.2f} CPU s/1M, steal {res['steal_percent']}%, "
                      f"load {res['load_before']}, correct={res['correct']}", flush=True)
        out["count"] = runs
        for key in ("msgs_per_s", "cpu_s_per_1m"):
            b, f = _median(runs["before"], key), _median(runs["after"], key)
            print(f"count median {key}: before {b:,.2f}, after {f:,.2f} ({(f / b - 1) * 100:+.1f}%)")
    if "restore" in only:
        job = f"undo-restore-{salt}"
        topic = f"{job}-1-bench-changelog"
        changelog(a.bootstrap, topic, a.restore_records, a.restore_keys)
        config = work / "restore.properties"
        config.write_text(
            f"job.name={job}\njob.id=1\njob.logged.store.base.dir={work / 'rstate'}\n"
            f"systems.kafka.bootstrap.servers={a.bootstrap}\n"
            "stores.bench.factory=rocksdb\nstores.bench.key.serde=string\n"
            f"stores.bench.msg.serde=json\nstores.bench.changelog=kafka.{topic}\n"
            "task.processing.guarantee=at-least-once\n")
        rruns: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for r in range(a.runs):
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for which in order:
                res = restore_once(config, trees[which], work, f"{which}{r}")
                rruns[which].append(res)
                print(f"restore {which} run {r + 1}: {res['records_per_s']:,.0f} rec/s, "
                      f"{res['cpu_s']:.2f} CPU s, steal {res['steal_percent']}%, "
                      f"load {res['load_before']}", flush=True)
        out["restore"] = rruns
        for key in ("records_per_s", "cpu_s"):
            b, f = _median(rruns["before"], key), _median(rruns["after"], key)
            print(f"restore median {key}: before {b:,.2f}, after {f:,.2f} "
                  f"({(f / b - 1) * 100:+.1f}%)")
    if "micro" in only:
        out["micro"] = micro()
    out["load_at_end"] = load_average()
    (work / "undo_cost.json").write_text(json.dumps(out, indent=1))
    print(f"results: {work / 'undo_cost.json'}")


if __name__ == "__main__":
    main()

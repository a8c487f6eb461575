"""A job inside a real memory cap (issue #36's acceptance): ``job.container.memory.mb`` = the
cap and nothing else, a read-then-write store of ``--keys`` x ``--value-bytes`` documents,
run in a cgroup (v1 or v2) of the same size.

    .venv/bin/python -m benchmarks.memory_cap [--keys 1600000] [--value-bytes 1024]
        [--cap-mb 384] [--tasks 1] [--stores 1] [--updates N] [--json-out FILE]

Phases, each a ``millpond`` process inside the cgroup:

1. ``build``: ``run --bounded`` over one message per key (every get a miss, every put new);
2. ``restart``: ``--updates`` more messages for random keys, ``run --bounded`` on the local
   stores (random reads of old documents from RocksDB);
3. ``restore``: local state deleted, ``millpond restore`` of every changelog;
4. ``run-restore``: local state deleted, ``--updates`` more random updates, ``run --bounded``
   restoring inside the run, then the updates.

Each phase records its exit code, the cgroup's OOM kills, the peak RssAnon and RssFile of the
process (sampled every 0.2 s from /proc), the cgroup's own peak charge (page cache included;
``memory.max_usage_in_bytes`` on v1, ``memory.peak`` on v2), wall time, load average and CPU
steal. After the last phase every store is read back from RocksDB: every key's last document
and version count, nothing else. ``--tasks`` partitions the input (one task each, all in one
process); ``--stores 2`` makes the task write each document into two stores; ``--keys`` is the
total over all tasks.

Writes ``memory-cap-<tasks>x<stores>.json`` and ``.md`` into ``--out-dir``
(benchmarks/out/), and ``--json-out`` for `make bench` (workload ``memory-cap``).
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from rocksdict import AccessType, Options, Rdict

from benchmarks.common import MILLPOND, REPO, Conditions, write_json
from benchmarks.data import create_topic, delete_topics
from millpond.dev.cgroup import MemoryCgroup, Run

MiB = 1024 * 1024
STORES = ("docs", "docs-b")


def body(key: str, version: int, value_bytes: int) -> str:
    """``value_bytes`` of incompressible text (base64), the same for the same key and version."""
    raw = random.Random(f"{key}:{version}").randbytes(max(1, value_bytes * 3 // 4))
    return base64.b64encode(raw).decode()


def produce(bootstrap: str, topic: str, keys: list[str], versions: Counter[str],
            value_bytes: int) -> float:
    """One message per entry of ``keys`` (a key's next version each); returns msg/s."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 200_000,
                         "compression.type": "none"})
    began = time.monotonic()
    for key in keys:
        versions[key] += 1
        value = json.dumps({"id": key, "body": body(key, versions[key], value_bytes)})
        while True:
            try:
                producer.produce(topic, value.encode(), key.encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not deliver every message to {topic}")
    return len(keys) / max(time.monotonic() - began, 1e-9)


def store_dirs(state: Path, store: str) -> list[Path]:
    """The RocksDB directory of each partition of ``store`` under ``state``."""
    return sorted(p.parent for p in state.rglob("CURRENT")
                  if p.parent.name.startswith("partition-")
                  and not p.parent.name.endswith(".checkpoint")
                  and store in p.parent.relative_to(state).parts)


def check_exact(state: Path, stores: list[str], versions: Counter[str],
                value_bytes: int) -> dict[str, Any]:
    """Every store holds every key once with its last version's body and count, and nothing
    else; returns what was found (``exact`` and the first differences)."""
    out: dict[str, Any] = {"exact": True, "keys": {}, "wrong": []}
    for store in stores:
        seen = 0
        dirs = store_dirs(state, store)
        for d in dirs:
            db = Rdict(str(d), Options(raw_mode=True), access_type=AccessType.read_only())
            try:
                for raw_key, raw in db.items():
                    key = raw_key.decode()
                    want = {"n": versions[key], "body": body(key, versions[key], value_bytes)}
                    if json.loads(raw) != want and len(out["wrong"]) < 5:
                        out["wrong"].append(f"{store} {key}")
                    seen += 1
            finally:
                db.close()
        out["keys"][store] = seen
        if seen != len(versions):
            out["wrong"].append(f"{store}: {seen:,} keys in {len(dirs)} dirs, "
                                f"{len(versions):,} expected")
    out["exact"] = not out["wrong"]
    return out


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def write_config(path: Path, a: argparse.Namespace, name: str, inputs: str,
                 state: Path) -> list[str]:
    stores = list(STORES[:a.stores])
    props: dict[str, Any] = {
        "job.name": name,
        "task.class": "benchmarks.jobs.CappedDocuments",
        "task.inputs": f"kafka.{inputs}",
        "task.commit.ms": a.commit_ms,
        "job.container.memory.mb": a.cap_mb,
        "systems.kafka.bootstrap.servers": a.bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "job.logged.store.base.dir": str(state),
    }
    if a.stores > 1:
        props["bench.second.store"] = stores[1]
    for s in stores:
        props.update({f"stores.{s}.factory": "rocksdb", f"stores.{s}.key.serde": "string",
                      f"stores.{s}.msg.serde": "json",
                      f"stores.{s}.changelog": f"kafka.{name}-{s}-changelog"})
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return stores


def phase_row(what: str, done: Run, cond: Conditions, cap: int, messages: int) -> dict[str, Any]:
    return {"phase": what, "returncode": done.returncode, "oom_kills": done.oom_kills,
            "peak_rss_anon_mb": round(done.peak_anon / MiB, 1),
            "peak_rss_file_mb": round(done.peak_file / MiB, 1),
            "peak_rss_mb": round(done.peak_rss / MiB, 1),
            "cgroup_peak_mb": round(done.peak_cgroup / MiB, 1),
            "budget_mb": round(cap / MiB, 1),
            # RSS = RssAnon + RssFile (each's peak: an upper bound of their sum's)
            "peak_rss_sum_mb": round((done.peak_anon + done.peak_file) / MiB, 1),
            "within_budget": done.peak_anon + done.peak_file <= cap,
            "wall_s": round(done.wall_s, 1),
            "messages": messages,
            "msgs_per_s": round(messages / done.wall_s) if messages and done.wall_s else None,
            **cond.fields(), "log_tail": done.output[-2000:]}


def run(a: argparse.Namespace) -> dict[str, Any]:
    cap = a.cap_mb * MiB
    salt = uuid.uuid4().hex[:6]
    name = f"millpond-memcap-{salt}"
    inputs = f"{name}-in"
    work = a.work_dir or Path(f"/tmp/{name}")
    work.mkdir(parents=True, exist_ok=True)
    state = work / "state"
    config = work / "job.properties"
    stores = write_config(config, a, name, inputs, state)
    result: dict[str, Any] = {
        "what": "a read-then-write job inside a cgroup of the cap, job.container.memory.mb="
                "the cap and nothing else",
        "keys": a.keys, "value_bytes": a.value_bytes, "cap_mb": a.cap_mb, "tasks": a.tasks,
        "stores_per_task": a.stores, "updates": a.updates, "phases": [], "problems": []}
    explain = subprocess.run([MILLPOND, "status", "--config", str(config), "--explain-memory"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    result["memory_plan"] = explain.stdout.strip() or explain.stderr.strip()[-1000:]
    group = MemoryCgroup.make(cap)
    result["cgroup"] = f"v{group.version} {group.path}"
    topics = [inputs] + [f"{name}-{s}-changelog" for s in stores]
    try:
        create_topic(a.bootstrap, inputs, a.tasks)
        keys = [f"doc-{i:08d}" for i in range(a.keys)]
        versions: Counter[str] = Counter()
        rng = random.Random(a.seed)
        say(f"producing {a.keys:,} x {a.value_bytes} B into {inputs} ({a.tasks} partitions)")
        rate = produce(a.bootstrap, inputs, keys, versions, a.value_bytes)
        say(f"  {rate:,.0f} msg/s")

        def phase(what: str, args: list[str], messages: int) -> bool:
            say(f"{what}: millpond {' '.join(args)} in a {a.cap_mb} MB cgroup")
            with Conditions() as cond:
                done = group.run([MILLPOND, *args, "--config", str(config)], REPO,
                                 timeout=a.timeout, log_dir=work)
            row = phase_row(what, done, cond, cap, messages)
            result["phases"].append(row)
            say(f"  exit {done.returncode}, oom kills {done.oom_kills}, RssAnon "
                f"{row['peak_rss_anon_mb']} MiB, RssFile {row['peak_rss_file_mb']} MiB, "
                f"cgroup peak {row['cgroup_peak_mb']} MiB, {row['wall_s']} s")
            if done.returncode != 0 or done.oom_kills:
                result["problems"].append(f"{what}: exit {done.returncode}, oom kills "
                                          f"{done.oom_kills}: {done.output[-1500:]}")
                return False
            if not row["within_budget"]:
                result["problems"].append(f"{what}: RSS {row['peak_rss_sum_mb']} MiB "
                                          f"over the {a.cap_mb} MiB budget")
            return True

        ok = phase("build", ["run", "--bounded"], a.keys)
        result["store_bytes"] = dir_bytes(state) if state.exists() else 0
        if ok and a.updates:
            produce(a.bootstrap, inputs, rng.choices(keys, k=a.updates), versions, a.value_bytes)
            ok = phase("restart", ["run", "--bounded"], a.updates)
        if ok:
            shutil.rmtree(state, ignore_errors=True)
            ok = phase("restore", ["restore"], a.keys)
        if ok:
            shutil.rmtree(state, ignore_errors=True)
            if a.updates:
                produce(a.bootstrap, inputs, rng.choices(keys, k=a.updates), versions,
                        a.value_bytes)
            ok = phase("run-restore", ["run", "--bounded"], a.keys + a.updates)
        if ok:
            say("reading every store back")
            began = time.monotonic()
            result["check"] = check_exact(state, stores, versions, a.value_bytes)
            result["check"]["seconds"] = round(time.monotonic() - began, 1)
            if not result["check"]["exact"]:
                result["problems"].append(f"state is NOT exact: {result['check']['wrong']}")
            say(f"  exact: {result['check']['exact']} {result['check']['keys']}")
        else:  # a killed phase leaves its restore half done, by design: a rerun resumes it
            result["check"] = {"exact": None, "not_checked": "a phase failed"}
        result["ok"] = ok and not result["problems"]
    finally:
        group.close()
        if not a.keep:
            delete_topics(a.bootstrap, topics)
            shutil.rmtree(state, ignore_errors=True)
    return result


def markdown(r: dict[str, Any]) -> str:
    gb = r.get("store_bytes", 0) / 1e9
    lines = [f"### Memory cap: {r['keys']:,} keys x {r['value_bytes']} B, {r['tasks']} task(s) "
             f"x {r['stores_per_task']} store(s), cgroup and job.container.memory.mb = "
             f"{r['cap_mb']} MB ({r.get('cgroup', '')})", "",
             f"Stores after the build: {gb:.2f} GB on disk; {r['updates']:,} random updates "
             f"before `restart` and before `run-restore`. Exact after the last phase: "
             f"**{(r.get('check') or {}).get('exact')}**.", "",
             "| phase | exit | OOM kills | peak RssAnon | peak RssFile | peak RSS (anon + file) "
             "| budget | RSS <= budget | cgroup peak (page cache incl.) | wall | msg/s "
             "| load avg | steal |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- "
             "| ---: |"]
    for p in r["phases"]:
        load = "/".join(f"{x:g}" for x in (p.get("load_average_before") or []))
        lines.append(
            f"| {p['phase']} | {p['returncode']} | {p['oom_kills']} | "
            f"{p['peak_rss_anon_mb']} MiB | {p['peak_rss_file_mb']} MiB | "
            f"{p['peak_rss_sum_mb']} MiB | {p['budget_mb']:g} MiB | "
            f"{'yes' if p['within_budget'] else '**no**'} | {p['cgroup_peak_mb']} MiB | "
            f"{p['wall_s']} s | "
            f"{p['msgs_per_s'] or ''} | {load} | {p.get('cpu_steal_percent')}% |")
    for prob in r.get("problems", []):
        lines.append(f"\n**Problem:** {prob[:500]}")
    return "\n".join(lines) + "\n"


def say(msg: str) -> None:
    print(f"[memory-cap {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory_cap",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=1_600_000,
                   help="distinct keys over all tasks (default 1.6M)")
    p.add_argument("--value-bytes", type=int, default=1024, help="bytes of each body (1024)")
    p.add_argument("--cap-mb", type=int, default=384,
                   help="the cgroup's limit and job.container.memory.mb (default 384)")
    p.add_argument("--tasks", type=int, default=1, help="input partitions = tasks (default 1)")
    p.add_argument("--stores", type=int, choices=(1, 2), default=1,
                   help="stores per task (default 1; 2: each document into both)")
    p.add_argument("--updates", type=int,
                   help="random updates before restart and before run-restore (default "
                        "keys / 10)")
    p.add_argument("--commit-ms", type=int, default=5000, help="task.commit.ms (5000)")
    p.add_argument("--seed", type=int, default=7, help="seed of the random updates")
    p.add_argument("--timeout", type=float, default=5400, help="seconds per phase")
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "out")
    p.add_argument("--json-out", type=Path, help="also write the JSON here (make bench)")
    p.add_argument("--work-dir", type=Path, help="config and state (default /tmp/<job>)")
    p.add_argument("--keep", action="store_true", help="keep the topics and the state")
    p.add_argument("--report-only", action="store_true",
                   help="exit 0 when the figures were written even if a phase failed or went "
                        "over the budget (make bench reads them from --json-out)")
    a = p.parse_args(argv)
    if a.updates is None:
        a.updates = a.keys // 10
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        result = run(a)
    except OSError as exc:
        say(f"no writable cgroup: {exc}")
        result = {"ok": False, "problems": [f"no writable cgroup (v1 or v2): {exc}"],
                  "keys": a.keys, "value_bytes": a.value_bytes, "cap_mb": a.cap_mb,
                  "tasks": a.tasks, "stores_per_task": a.stores, "updates": a.updates,
                  "phases": []}
    stem = f"memory-cap-{a.tasks}x{a.stores}"
    write_json(a.out_dir / f"{stem}.json", result)
    (a.out_dir / f"{stem}.md").write_text(markdown(result))
    if a.json_out:
        write_json(a.json_out, result)
    print(markdown(result))
    return 0 if result.get("ok") or (a.report_only and result.get("phases")) else 1


if __name__ == "__main__":
    sys.exit(main())

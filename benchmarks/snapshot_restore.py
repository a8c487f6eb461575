"""Restore a store partition onto an empty state directory: snapshot + tail vs full replay.

Builds one store partition of ``--records`` records of ~100 bytes (11-byte key, 88-byte
value) the real way: a ``millpond run --bounded`` job (``benchmarks.jobs.BenchKeeper``, one
input partition) writes each record through its store and changelog into the broker. The
job's last commit checkpoint is then uploaded as a snapshot to a real S3Proxy
(``millpond.dev.s3.LocalS3``, started here) by the backup uploader the job itself uses, and
a second run of the job writes a tail of ``--tail-percent`` more records (half updates of
existing keys, half new keys) with backups off, so the snapshot is behind the changelog.

Then, ``--runs`` times (order alternating), each into an emptied state directory and each in
its own child process (peak RSS per restore from its VmHWM): ``millpond restore --full``
(replay the whole changelog) and ``millpond restore --from-backup`` (download the snapshot,
replay the tail). Every restored store is compared with the job's own store (key count and a
SHA-256 over keys and values in key order); a restore that differs fails the benchmark.

    .venv/bin/python -m benchmarks.snapshot_restore --records 4000000 --json-out out.json
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.common import MILLPOND, Child, cpu_model, load_average, run_child
from benchmarks.systems import free_port, restore_rows

STORE = "kept"
BUCKET = "millpond-bench"
VALUE_BYTES = 88  # + an 11-byte key: ~100-byte records
# The job runs with its store's uploads off: the one snapshot is uploaded from its last
# checkpoint by upload_snapshot (the job's shutdown waits only 30 s for an upload in flight).
NO_UPLOADS = ("--config-override", f"stores.{STORE}.backup.enabled=false")


class RestoreMismatch(SystemExit):
    """A restored store differs from the store the job wrote."""


def key_of(i: int) -> str:
    return f"k{i:010d}"


def produce_range(bootstrap: str, topic: str, keys: list[int] | range) -> int:
    """One record per key with a fresh incompressible value; the bytes produced."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 500000,
                         "enable.idempotence": True})
    size = 0
    for i in keys:
        key = key_of(i).encode()
        value = base64.b64encode(os.urandom(VALUE_BYTES * 3 // 4))
        size += len(key) + len(value)
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(120)
    if left:
        raise SystemExit(f"{left} input records to {topic} were not delivered within 120 s")
    return size


def store_digest(path: Path) -> dict[str, Any]:
    """Key count and SHA-256 over (key, value) in key order of the RocksDB store at ``path``."""
    from millpond.stores import RocksDbEngine

    if not path.is_dir():
        raise SystemExit(f"no store at {path}")
    digest = hashlib.sha256()
    keys = 0
    engine = RocksDbEngine(path)
    try:
        with engine.all() as entries:
            for k, v in entries:
                digest.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
                keys += 1
    finally:
        engine.close()
    return {"keys": keys, "sha256": digest.hexdigest()}


def changelog_size(bootstrap: str, topic: str) -> dict[str, int]:
    """Records and key+value bytes of ``topic`` partition 0 (read once, not timed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        tp = TopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=30)
        consumer.assign([TopicPartition(topic, 0, low)])
        records = size = 0
        deadline = time.monotonic() + 1800
        position = low
        while position < high:  # transaction markers take offsets too: ask the position
            if time.monotonic() > deadline:
                raise SystemExit(f"reading {topic} took more than 1800 s")
            batch = consumer.consume(10000, 1.0)
            for m in batch:
                if m.error():
                    continue
                records += 1
                size += len(m.key() or b"") + len(m.value() or b"")
            if not batch:
                position = max(position, consumer.position([tp])[0].offset)
        return {"records": records, "bytes": size, "end_offset": high}
    finally:
        consumer.close()


def write_config(path: Path, props: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def run_job(config: Path, work: Path, name: str, records: int, *extra: str) -> Child:
    child = run_child([MILLPOND, "run", "--config", str(config), "--bounded", *extra],
                      timeout=300 + records / 2000, logdir=work, name=name)
    if child.returncode != 0:
        raise SystemExit(f"the job's {name} run failed (exit {child.returncode}): {child.tail()}")
    return child


def upload_snapshot(config_path: Path, live: Path) -> dict[str, Any]:
    """Upload the job's last commit checkpoint of ``live`` with the job's backup uploader."""
    from millpond.backup import StateBackups
    from millpond.changelog import local
    from millpond.changelog.checkpoint import read_offset_file
    from millpond.config import Config

    config = Config.load(config_path)
    checkpoint = local.checkpoint_dir(live)
    offset = read_offset_file(checkpoint)
    if offset is None:
        raise SystemExit(f"the job left no checkpoint with an OFFSET at {checkpoint}")
    backups = StateBackups(config)
    began = time.monotonic()
    try:
        backups.after_checkpoint(config.stores[STORE], offset.topic, 0, checkpoint,
                                 offset.offset)
        assert backups.uploader is not None
        if not backups.uploader.wait_idle(1800):
            raise SystemExit("the snapshot upload did not finish within 1800 s")
        status = backups.uploader.status.get((STORE, 0))
        if status is None or status.uploads != 1:
            raise SystemExit(f"the snapshot upload failed: {status}")
    finally:
        backups.close()
    seconds = time.monotonic() - began
    [manifest] = backups.location.manifests(STORE, 0)
    return {"id": manifest.id, "offset": manifest.offset, "bytes": manifest.size,
            "files": len(manifest.files),
            "sst_files": sum(1 for f in manifest.files if f.name.endswith(".sst")),
            "upload_s": round(seconds, 2)}


_DOWNLOADED = re.compile(r"after snapshot (\S+) \((\d+) bytes downloaded in ([\d.]+) s")


def restore(config: Path, state: Path, mode: str, work: Path, tag: str,
            records: int) -> dict[str, Any]:
    """One ``millpond restore`` (``--full`` or ``--from-backup``) into an emptied ``state``."""
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    flag = "--full" if mode == "full" else "--from-backup"
    child = run_child([MILLPOND, "restore", "--config", str(config), flag],
                      timeout=600 + records / 1000, logdir=work, name=f"restore-{mode}-{tag}")
    if child.returncode != 0:
        raise SystemExit(f"millpond restore {flag} failed (exit {child.returncode}): "
                         f"{child.tail()}")
    rows = restore_rows(child.stdout)
    if len(rows) != 1:
        raise SystemExit(f"millpond restore {flag} restored {len(rows)} store partitions, "
                         f"expected 1:\n{child.stdout}")
    row = rows[0]
    out: dict[str, Any] = {
        "mode": mode, "wall_s": child.wall_s, "replay_s": row["seconds"],
        "replayed_records": row["records"], "changelog_bytes": row["value_bytes"],
        "snapshot_bytes": 0, "cpu_s": child.cpu_s, "maxrss_mb": child.maxrss_mb,
        "load_average_before": child.load_before, "cpu_steal_percent": child.steal_percent}
    got = _DOWNLOADED.search(child.stdout)
    if mode == "backup":
        if got is None:
            raise SystemExit(f"millpond restore --from-backup did not start from a snapshot:"
                             f"\n{child.tail()}")
        out["snapshot"] = got.group(1)
        out["snapshot_bytes"] = int(got.group(2))
        out["download_s"] = float(got.group(3))
    elif got is not None:
        raise SystemExit(f"millpond restore --full used a snapshot:\n{child.stdout}")
    out["downloaded_bytes"] = out["snapshot_bytes"] + out["changelog_bytes"]
    return out


def summarize(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "runs": values}


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from millpond.changelog import local
    from millpond.dev.s3 import LocalS3

    n, tail = args.records, max(2, round(args.records * args.tail_percent / 100))
    updates, new = tail // 2, tail - tail // 2
    job = f"bench-snap-{n}-{int(time.time())}-{os.getpid()}"
    source, changelog = f"{job}-in", f"{job}-1-{STORE}-changelog"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    s3 = LocalS3(work / "s3", port=free_port())
    print(f"starting S3Proxy on {s3.endpoint} ...", file=sys.stderr)
    s3.start(timeout=120)
    try:
        import s3fs

        s3fs.S3FileSystem(**s3.storage_options(), skip_instance_cache=True).call_s3(
            "create_bucket", Bucket=BUCKET)
        for topic, config in ((source, {}), (changelog, {"cleanup.policy": "compact"})):
            admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(60)
        opts = s3.storage_options()
        props: dict[str, Any] = {
            "job.name": job, "job.id": 1,
            "task.class": "benchmarks.jobs.BenchKeeper",
            "task.inputs": f"kafka.{source}",
            "systems.kafka.bootstrap.servers": args.bootstrap,
            "systems.kafka.samza.key.serde": "string",
            "systems.kafka.samza.msg.serde": "string",
            f"stores.{STORE}.factory": "rocksdb",
            f"stores.{STORE}.key.serde": "string",
            f"stores.{STORE}.msg.serde": "string",
            f"stores.{STORE}.changelog": f"kafka.{changelog}",
            "job.logged.store.base.dir": str(work / "job-state"),
            "job.state.backup.uri": f"s3://{BUCKET}/{job}",
            "job.state.backup.options.key": opts["key"],
            "job.state.backup.options.secret": opts["secret"],
            "job.state.backup.options.client_kwargs.endpoint_url":
                opts["client_kwargs"]["endpoint_url"],
            "job.state.backup.options.client_kwargs.region_name": "us-east-1",
        }
        job_config = write_config(work / "job.properties", props)
        live = local.store_dir(work / "job-state", job, STORE, 0)

        print(f"writing {n:,} records through the job ...", file=sys.stderr)
        began = time.monotonic()
        input_bytes = produce_range(args.bootstrap, source, range(n))
        first = run_job(job_config, work, "job-1", n, *NO_UPLOADS)
        build_s = time.monotonic() - began
        print(f"  job wrote the store in {first.wall_s:.1f} s; uploading the snapshot ...",
              file=sys.stderr)
        snapshot = upload_snapshot(job_config, live)
        print(f"  snapshot {snapshot['id']} at offset {snapshot['offset']:,}: "
              f"{snapshot['bytes']:,} bytes, {snapshot['files']} files "
              f"({snapshot['sst_files']} SST) in {snapshot['upload_s']} s", file=sys.stderr)

        step = max(1, n // max(1, updates))
        tail_keys = [*range(0, step * updates, step)][:updates] + [*range(n, n + new)]
        print(f"writing the tail: {updates:,} updates and {new:,} new keys ...",
              file=sys.stderr)
        input_bytes += produce_range(args.bootstrap, source, tail_keys)
        run_job(job_config, work, "job-2", len(tail_keys), *NO_UPLOADS)
        expected = store_digest(live)
        if expected["keys"] != n + new:
            raise SystemExit(f"the job's store holds {expected['keys']:,} keys, expected "
                             f"{n + new:,}")
        cl = changelog_size(args.bootstrap, changelog)
        tail_records = cl["end_offset"] - 1 - snapshot["offset"]
        print(f"changelog: {cl['records']:,} records, {cl['bytes']:,} bytes; "
              f"tail after the snapshot: ~{tail_records:,} offsets", file=sys.stderr)

        configs = {}
        for mode in ("full", "backup"):
            configs[mode] = write_config(work / f"restore-{mode}.properties", {
                **props, "job.logged.store.base.dir": str(work / f"{mode}-state")})
        runs: dict[str, list[dict[str, Any]]] = {"full": [], "backup": []}
        for r in range(args.runs):
            order = ("full", "backup") if r % 2 == 0 else ("backup", "full")
            for mode in order:
                res = restore(configs[mode], work / f"{mode}-state", mode, work, str(r), n)
                got = store_digest(local.store_dir(work / f"{mode}-state", job, STORE, 0))
                res.update(restored_keys=got["keys"], sha256=got["sha256"],
                           equal=got == expected)
                runs[mode].append(res)
                print(f"  run {r + 1} {mode:>6}: wall {res['wall_s']:.2f} s, replay "
                      f"{res['replay_s']:.2f} s of {res['replayed_records']:,} records, "
                      f"downloaded {res['downloaded_bytes']:,} bytes, peak RSS "
                      f"{res['maxrss_mb']:.0f} MB, {'equal' if res['equal'] else 'DIFFERENT'}",
                      file=sys.stderr)
                if not res["equal"]:
                    raise RestoreMismatch(
                        f"the {mode} restore differs from the job's store: {got} != {expected}")
        ratios = [f["wall_s"] / b["wall_s"] for f, b in zip(runs["full"], runs["backup"],
                                                            strict=True)]
        figures: dict[str, Any] = {}
        for mode, rs in runs.items():
            figures[mode] = {k: summarize([x[k] for x in rs])
                             for k in ("wall_s", "replay_s", "downloaded_bytes", "maxrss_mb",
                                       "cpu_s")}
        return {
            "benchmark": "snapshot_restore", "records": n, "value_bytes": VALUE_BYTES,
            "tail_percent": args.tail_percent, "tail_updates": updates, "tail_new_keys": new,
            "input_bytes": input_bytes, "build_s": round(build_s, 1),
            "job_wall_s": round(first.wall_s, 1), "snapshot": snapshot, "changelog": cl,
            "tail_offsets": tail_records, "expected": expected,
            "stores_equal": all(x["equal"] for rs in runs.values() for x in rs),
            "runs": runs, "figures": figures, "speedup": summarize(ratios),
            "speedup_goal": 5.0, "s3proxy": s3.endpoint, "cpu_model": cpu_model(),
            "cpus": os.cpu_count(), "load_average_end": load_average(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
    finally:
        s3.stop()
        if not args.keep_topics:
            topics = [source, changelog, f"__millpond_checkpoint_{job}_1"]
            for future in admin.delete_topics(topics).values():
                try:
                    future.result(60)
                except Exception:
                    pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--records", type=int, default=4_000_000,
                        help="records of the store partition (default 4M)")
    parser.add_argument("--tail-percent", type=float, default=2.0,
                        help="records written after the snapshot, in %% of --records "
                             "(half updates, half new keys; default 2)")
    parser.add_argument("--runs", type=int, default=3, help="restore pairs (default 3)")
    parser.add_argument("--work-dir", type=Path, help="scratch dir (default: a temp dir)")
    parser.add_argument("--keep-topics", action="store_true")
    parser.add_argument("--json-out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.records < 10 or args.runs < 1 or not 0 < args.tail_percent <= 50:
        parser.error("--records >= 10, --runs >= 1 and 0 < --tail-percent <= 50")
    work = Path(tempfile.mkdtemp(prefix="millpond-snapshot-restore-", dir=args.work_dir))
    try:
        result = bench(args, work)
    finally:
        for d in ("job-state", "full-state", "backup-state", "s3"):
            shutil.rmtree(work / d, ignore_errors=True)
    f, b = result["figures"]["full"], result["figures"]["backup"]
    print(f"full replay      {f['wall_s']['median']:8.2f} s  downloaded "
          f"{f['downloaded_bytes']['median']:>14,.0f} B  peak RSS {f['maxrss_mb']['median']:6.0f} MB")
    print(f"snapshot + tail  {b['wall_s']['median']:8.2f} s  downloaded "
          f"{b['downloaded_bytes']['median']:>14,.0f} B  peak RSS {b['maxrss_mb']['median']:6.0f} MB")
    print(f"speedup {result['speedup']['median']:.2f}x (goal >= 5x); stores equal: "
          f"{result['stores_equal']}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

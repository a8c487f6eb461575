"""Restore memory against changelog size: peak RSS of `millpond restore --full` per size.

For each size N, writes N records of ~90 bytes (about N distinct keys, so the state grows
with N too: the hard case) to a fresh compacted changelog, then restores it in a child
process and reads the child's peak RSS (VmHWM). Memory must stay bounded by the consumer's
prefetch and RocksDB's write buffers and cache, whatever N is.

    .venv/bin/python -m benchmarks.restore_scaling --sizes 2000000,4000000,8000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.common import MILLPOND, cpu_model, run_child
from benchmarks.spark_rebuild import produce
from benchmarks.systems import restore_rows

STORE = "bench"


def restore_once(bootstrap: str, records: int, partitions: int, work: Path) -> dict[str, float]:
    """Write a changelog of ``records`` records, restore it in a child, report time and RSS."""
    job = f"bench-scale-{records}-{int(time.time())}-{os.getpid()}"
    topic = f"{job}-1-{STORE}-changelog"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1,
                                  config={"cleanup.policy": "compact"})])[topic].result(60)
    config = work / f"{job}.properties"
    config.write_text(
        f"job.name={job}\njob.id=1\n"
        f"job.logged.store.base.dir={work / 'state'}\n"
        f"systems.kafka.bootstrap.servers={bootstrap}\n"
        f"stores.{STORE}.factory=rocksdb\n"
        f"stores.{STORE}.key.serde=string\n"
        f"stores.{STORE}.msg.serde=string\n"
        f"stores.{STORE}.changelog=kafka.{topic}\n"
        "task.processing.guarantee=at-least-once\n")
    try:
        size, _ = produce(bootstrap, topic, records, partitions, records, 0.0, seed=records)
        child = run_child([MILLPOND, "restore", "--config", str(config), "--full"],
                          timeout=1800, logdir=work, name=f"restore-{records}")
        if child.returncode != 0:
            raise SystemExit(f"restore of {records:,} records failed: {child.tail()}")
        rows = restore_rows(child.stdout)
        restored = sum(r["records"] for r in rows)
        seconds = sum(r["seconds"] for r in rows)
        return {"records": restored, "bytes": size, "restore_s": seconds,
                "records_per_s": restored / seconds if seconds else 0.0,
                "mb_per_s": size / 1e6 / seconds if seconds else 0.0,
                "process_wall_s": child.wall_s, "maxrss_mb": child.maxrss_mb}
    finally:
        admin.delete_topics([topic])[topic].result(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--sizes", default="2000000,4000000,8000000",
                        help="changelog sizes in records, comma-separated")
    parser.add_argument("--partitions", type=int, default=4, help="changelog partitions")
    parser.add_argument("--json-out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="millpond-restore-scaling-") as tmp:
        for n in sizes:
            print(f"restore of {n:,} records ...", file=sys.stderr)
            res = restore_once(args.bootstrap, n, args.partitions, Path(tmp))
            results.append(res)
            print(f"{n:>12,} records  {res['records_per_s']:>10,.0f} rec/s  "
                  f"{res['mb_per_s']:6.1f} MB/s  peak RSS {res['maxrss_mb']:6.0f} MB")
    rss = [r["maxrss_mb"] for r in results]
    growth = max(rss) / min(rss) if rss and min(rss) > 0 else 0.0
    print(f"peak RSS max/min over {sizes[-1] / sizes[0]:.0f}x the records: {growth:.2f}")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({
            "sizes": sizes, "runs": results, "rss_growth": growth,
            "size_ratio": sizes[-1] / sizes[0], "cpu_model": cpu_model(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

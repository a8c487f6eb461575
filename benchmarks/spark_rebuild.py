"""Benchmark: rebuild a store from its changelog with Spark (records read per second).

Produces a changelog of N records (~100 bytes each: string keys, JSON object values, some
tombstones) to a fresh compacted topic, then times ``millpond.spark.rebuild`` on it in
``local[2]`` (Spark start-up excluded). Prints and writes a JSON result.

    python -m benchmarks.spark_rebuild --records 200000 --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from millpond.config import Config, parse_properties

STORE = "bench"


def produce(bootstrap: str, topic: str, records: int, partitions: int, keys: int,
            tombstone_rate: float, seed: int) -> tuple[int, float]:
    """Write ``records`` changelog records; return (bytes written, seconds)."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
        "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20,
    })
    rng = random.Random(seed)
    pad = "x" * 40
    written = 0
    started = time.monotonic()
    for i in range(records):
        k = rng.randrange(keys)
        key = f"key-{k:010d}".encode()
        value = None if rng.random() < tombstone_rate else (
            f'{{"seq":{i},"user":{k},"score":{i * 0.5},"pad":"{pad}"}}'.encode()
        )
        written += len(key) + (len(value) if value else 0)
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=k % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise SystemExit("could not deliver every changelog record within 300s")
    return written, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=None, help="distinct keys (default N/4)")
    parser.add_argument("--tombstone-rate", type=float, default=0.05)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--rocksdb-dirs", action="store_true",
                        help="also write per-partition RocksDB store directories")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/spark_rebuild.json"))
    parser.add_argument("--keep-topic", action="store_true")
    parser.add_argument("--keep-output", action="store_true",
                        help="keep the Parquet output and store dirs (in a temp dir)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    from millpond.spark.rebuild import rebuild
    from millpond.spark.session import SparkSettings, get_spark

    job = f"bench-spark-{int(time.time())}-{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="millpond-spark-bench-"))
    config = Config.from_properties(parse_properties(
        f"job.name={job}\n"
        f"job.logged.store.base.dir={work / 'state'}\n"
        f"systems.kafka.bootstrap.servers={args.bootstrap}\n"
        f"stores.{STORE}.factory=rocksdb\n"
        f"stores.{STORE}.key.serde=string\n"
        f"stores.{STORE}.msg.serde=json\n"
        f"stores.{STORE}.changelog=kafka.{job}-1-{STORE}-changelog\n"
        "task.processing.guarantee=at-least-once\n",
        source="<benchmark>",
    ))
    topic = f"{job}-1-{STORE}-changelog"
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(topic, args.partitions, 1,
                                  config={"cleanup.policy": "compact"})])[topic].result(60)
    try:
        keys = args.keys or max(1, args.records // 4)
        print(f"producing {args.records:,} records ({keys:,} keys) to {topic} ...",
              file=sys.stderr)
        size, produce_s = produce(args.bootstrap, topic, args.records, args.partitions, keys,
                                  args.tombstone_rate, args.seed)
        settings = SparkSettings(master=args.master, driver_memory=args.driver_memory,
                                 shuffle_partitions=args.partitions, app_name="millpond-bench")
        started = time.monotonic()
        spark = get_spark(settings)
        startup_s = time.monotonic() - started
        print(f"rebuilding with Spark {spark.version} ({args.master}) ...", file=sys.stderr)
        result = rebuild(config, STORE, work / "out", rocksdb_dirs=args.rocksdb_dirs,
                         spark=spark)
        spark.stop()
        # Beside it: the single-process `millpond restore --full` of the same changelog.
        from millpond.ops import offline

        print("restoring the same changelog with millpond restore --full ...", file=sys.stderr)
        began = time.monotonic()
        restored = offline.restore(offline.Job(config), STORE, full=True)
        restore_s = time.monotonic() - began
        restore_records = sum(s.records for s in restored)
    finally:
        if not args.keep_topic:
            admin.delete_topics([topic])[topic].result(60)
        if args.keep_output:
            print(f"output kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    doc: dict[str, Any] = {
        "benchmark": "spark_rebuild",
        "records": result.records_read,
        "keys": result.keys,
        "partitions": args.partitions,
        "avg_record_bytes": round(size / args.records, 1),
        "master": args.master,
        "rocksdb_dirs": args.rocksdb_dirs,
        "rebuild_seconds": round(result.seconds, 2),
        "records_per_second": round(result.records_per_second),
        "spark_startup_seconds": round(startup_s, 2),
        "millpond_restore_records": restore_records,
        "millpond_restore_seconds": round(restore_s, 2),
        "millpond_restore_records_per_second": round(restore_records / restore_s),
        "produce_records_per_second": round(args.records / produce_s),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    text = json.dumps(doc, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: bootstrap a store from a Parquet file with Spark (records written per second).

Writes a Parquet source of N rows (``user_id`` string, ``views`` long; Spark writes it, not
timed), creates the job's input topic, then times ``millpond.spark.bootstrap`` of a count
store in ``local[2]`` (Spark start-up excluded): serialize, partition with the job's
partitioner, de-duplicate, produce to the changelog from the executors, checkpoint. Checks
that the changelog holds exactly N records and the checkpoints cover them. Prints and writes
a JSON result.

    python -m benchmarks.spark_bootstrap --records 2000000 --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from millpond.config import Config, parse_properties

STORE = "counts"


def changelog_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records in ``topic`` now (end - start per partition)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{os.getpid()}"})
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/spark_bootstrap.json"))
    parser.add_argument("--keep-topics", action="store_true")
    args = parser.parse_args(argv)

    from millpond.spark.bootstrap import bootstrap
    from millpond.spark.session import SparkSettings, get_spark

    job = f"bench-bootstrap-{int(time.time())}-{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix="millpond-bootstrap-bench-"))
    source, changelog = f"{job}-in", f"{job}-1-{STORE}-changelog"
    config = Config.from_properties(parse_properties(
        f"job.name={job}\n"
        f"task.inputs=kafka.{source}\n"
        f"job.logged.store.base.dir={work / 'state'}\n"
        f"systems.kafka.bootstrap.servers={args.bootstrap}\n"
        f"stores.{STORE}.factory=rocksdb\n"
        f"stores.{STORE}.key.serde=string\n"
        f"stores.{STORE}.msg.serde=json\n"
        f"stores.{STORE}.changelog=kafka.{changelog}\n",
        source="<benchmark>",
    ))
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    admin.create_topics([NewTopic(source, args.partitions, 1)])[source].result(60)
    try:
        settings = SparkSettings(master=args.master, driver_memory=args.driver_memory,
                                 shuffle_partitions=args.partitions, app_name="millpond-bench")
        started = time.monotonic()
        spark = get_spark(settings)
        startup_s = time.monotonic() - started
        parquet = work / "users.parquet"
        print(f"writing {args.records:,} rows to {parquet} ...", file=sys.stderr)
        from pyspark.sql import functions as F

        spark.range(args.records).select(
            F.format_string("user-%010d", F.col("id")).alias("user_id"),
            (F.col("id") % 1000 + 1).alias("views"),
        ).write.mode("overwrite").parquet(str(parquet))
        print(f"bootstrapping with Spark {spark.version} ({args.master}) ...", file=sys.stderr)
        result = bootstrap(config, STORE, parquet, "parquet", "user_id", ["views"], spark=spark)
        spark.stop()
        in_topic = changelog_records(args.bootstrap, changelog, args.partitions)
        covered = sum(p.checkpoint + 1 for p in result.partitions.values())
        if not in_topic == covered == result.records == args.records:
            raise SystemExit(f"bootstrap wrote {result.records}, the changelog holds "
                             f"{in_topic}, the checkpoints cover {covered}; expected "
                             f"{args.records}")
    finally:
        if not args.keep_topics:
            topics = [source, changelog, f"__millpond_checkpoint_{job}_1"]
            for future in admin.delete_topics(topics).values():
                try:
                    future.result(60)
                except Exception:
                    pass
        shutil.rmtree(work, ignore_errors=True)
    doc: dict[str, Any] = {
        "benchmark": "spark_bootstrap",
        "records": result.records,
        "keys": result.keys,
        "partitions": args.partitions,
        "master": args.master,
        "bootstrap_seconds": round(result.seconds, 2),
        "records_per_second": round(result.records_per_second),
        "spark_startup_seconds": round(startup_s, 2),
        "changelog_records": in_topic,
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

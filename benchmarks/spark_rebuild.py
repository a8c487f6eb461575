"""Benchmark: rebuild a store from its changelog with Spark (records read per second).

Produces a changelog of N records (~100 bytes each: string keys, JSON object values, some
tombstones; ``--value-bytes`` for bigger ones) to a fresh compacted topic, then times
``millpond.spark.rebuild`` on it with Spark's defaults (``local[*]``, 1 GB driver; Spark
start-up excluded), optionally ``spark audit`` of the RocksDB dirs it wrote, and beside them
``millpond restore --full`` of the same changelog; the peak RSS of each (this process and
its children: Spark's JVM, its Python workers) is sampled from /proc. Prints and writes a
JSON result.

    python -m benchmarks.spark_rebuild --records 200000 --bootstrap 127.0.0.1:9092
    # issue #36's 2 GB changelog (2M x 1 KB), kept for the next run with the same --job:
    python -m benchmarks.spark_rebuild --records 2000000 --keys 2000000 --value-bytes 1024 \
        --tombstone-rate 0 --rocksdb-dirs --no-parquet --audit --job big2g --keep-topic
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
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from benchmarks.common import Conditions
from millpond.config import Config, parse_properties

STORE = "bench"


def produce(bootstrap: str, topic: str, records: int, partitions: int, keys: int,
            tombstone_rate: float, seed: int, value_bytes: int = 100) -> tuple[int, float]:
    """Write ``records`` changelog records of ~``value_bytes`` each (a JSON object whose pad
    is random hex above 100 bytes, so it does not compress); return (bytes written, seconds)."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
        "compression.type": "lz4" if value_bytes <= 100 else "none",
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20,
    })
    rng = random.Random(seed)
    pad = "x" * 40
    randbytes = rng.randbytes
    random_pad = max(0, value_bytes - 60) // 2 if value_bytes > 100 else 0
    written = 0
    started = time.monotonic()
    for i in range(records):
        k = rng.randrange(keys)
        key = f"key-{k:010d}".encode()
        if random_pad:
            pad = randbytes(random_pad).hex()
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


class TreeRss(threading.Thread):
    """Peak RSS of this process and every descendant (Spark's JVM, its Python workers),
    sampled from /proc; :meth:`phase` starts a new peak."""

    def __init__(self, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.peak = 0
        self.tree = True  # False: this process only (Spark's idle JVM left out)
        self._done = threading.Event()

    def now(self) -> int:
        root = os.getpid()
        children: dict[int, list[int]] = {}
        for entry in (os.listdir("/proc") if self.tree else ()):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(
                        int(entry))
                except (OSError, ValueError, IndexError):
                    pass
        total, todo = 0, [root]
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            except (OSError, ValueError):
                pass
        return total

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, self.now())
            self._done.wait(self.every)

    def phase(self) -> int:
        """The peak since the last phase (bytes); starts a new one."""
        peak, self.peak = max(self.peak, self.now()), 0
        return peak

    def stop(self) -> None:
        self._done.set()
        self.join(2)


def _mb(n: int) -> float:
    return round(n / 2**20, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=None, help="distinct keys (default N/4)")
    parser.add_argument("--tombstone-rate", type=float, default=0.05)
    parser.add_argument("--value-bytes", type=int, default=100,
                        help="bytes per value (above 100: random, uncompressed; 1024 and 2M "
                             "records make the 2 GB changelog of issue #36)")
    parser.add_argument("--master", default="local[*]", help="default: Spark's")
    parser.add_argument("--driver-memory", default="1g", help="default: Spark's")
    parser.add_argument("--rocksdb-dirs", action="store_true",
                        help="also write per-partition RocksDB store directories")
    parser.add_argument("--no-parquet", action="store_true",
                        help="write no Parquet snapshot (with --rocksdb-dirs)")
    parser.add_argument("--audit", action="store_true",
                        help="then audit the RocksDB dirs against the changelog (needs "
                             "--rocksdb-dirs); fails unless they match")
    parser.add_argument("--job", default=None,
                        help="job name; its changelog is reused if it holds --records records "
                             "(make a big one once, with --keep-topic)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/spark_rebuild.json"))
    parser.add_argument("--keep-topic", action="store_true")
    parser.add_argument("--keep-output", action="store_true",
                        help="keep the Parquet output and store dirs (in a temp dir)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.audit and not args.rocksdb_dirs:
        parser.error("--audit needs --rocksdb-dirs")

    from millpond.spark.audit import audit
    from millpond.spark.rebuild import rebuild
    from millpond.spark.session import SparkSettings, get_spark

    job = args.job or f"bench-spark-{int(time.time())}-{os.getpid()}"
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
    reused = _records_in(args.bootstrap, topic) == args.records
    if not reused:
        admin.create_topics([NewTopic(topic, args.partitions, 1,
                                      config={"cleanup.policy": "compact"})])[topic].result(60)
    rss = TreeRss()
    rss.start()
    audited: Any = None
    try:
        keys = args.keys or max(1, args.records // 4)
        if reused:
            print(f"reusing {topic} ({args.records:,} records)", file=sys.stderr)
            size, produce_s = None, 0.0  # the broker's log size is not at hand
        else:
            print(f"producing {args.records:,} records ({keys:,} keys) to {topic} ...",
                  file=sys.stderr)
            size, produce_s = produce(args.bootstrap, topic, args.records, args.partitions,
                                      keys, args.tombstone_rate, args.seed, args.value_bytes)
        settings = SparkSettings(master=args.master, driver_memory=args.driver_memory,
                                 shuffle_partitions=args.partitions, app_name="millpond-bench")
        with Conditions() as conditions:
            started = time.monotonic()
            rss.phase()
            spark = get_spark(settings)
            startup_s = time.monotonic() - started
            print(f"rebuilding with Spark {spark.version} ({args.master}, driver "
                  f"{args.driver_memory}) ...", file=sys.stderr)
            result = rebuild(config, STORE, None if args.no_parquet else work / "out",
                             rocksdb_dirs=args.rocksdb_dirs, spark=spark)
            rebuild_rss = rss.phase()
            if args.audit:
                print("auditing the RocksDB dirs against the changelog ...", file=sys.stderr)
                audited = audit(config, STORE, spark=spark)
                if not audited.ok:
                    raise SystemExit(f"audit found divergence: {audited.to_dict()}")
            audit_rss = rss.phase()
            spark.stop()
        # Beside it: the single-process `millpond restore --full` of the same changelog.
        from millpond.ops import offline

        print("restoring the same changelog with millpond restore --full ...", file=sys.stderr)
        shutil.rmtree(work / "state", ignore_errors=True)
        rss.tree = False  # the restore runs in this process; Spark's JVM idles beside it
        rss.phase()
        began = time.monotonic()
        restored = offline.restore(offline.Job(config), STORE, full=True)
        restore_s = time.monotonic() - began
        restore_rss = rss.phase()
        restore_records = sum(s.records for s in restored)
    finally:
        rss.stop()
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
        "avg_record_bytes": round(size / args.records, 1) if size else None,
        "changelog_mb": _mb(size) if size else None,
        "master": args.master,
        "driver_memory": args.driver_memory,
        "rocksdb_dirs": args.rocksdb_dirs,
        "parquet": not args.no_parquet,
        "rebuild_seconds": round(result.seconds, 2),
        "records_per_second": round(result.records_per_second),
        "rebuild_peak_rss_mb": _mb(rebuild_rss),
        "spark_startup_seconds": round(startup_s, 2),
        "millpond_restore_records": restore_records,
        "millpond_restore_seconds": round(restore_s, 2),
        "millpond_restore_records_per_second": round(restore_records / restore_s),
        "millpond_restore_peak_rss_mb": _mb(restore_rss),  # this process only
        "produce_records_per_second": round(args.records / produce_s) if produce_s else None,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        **conditions.fields(),
    }
    if audited is not None:
        doc.update({"audit_seconds": round(audited.seconds, 2),
                    "audit_records_per_second": round(result.records_read / audited.seconds),
                    "audit_peak_rss_mb": _mb(audit_rss), "audit_ok": audited.ok})
    text = json.dumps(doc, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


def _records_in(bootstrap: str, topic: str) -> int | None:
    """Records in ``topic`` (end - start over its partitions), None if it does not exist."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark-probe"})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            return None
        total = 0
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            total += high - low
        return total
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())

"""Micro-benchmark: put and get of ONE hot key, millpond's cached store beside raw rocksdict.

What a skewed stream does to a task's store: the same key read and written again and again
(a hot user's count). millpond's store is the one a job gets (``build_store`` over
``RocksDbEngine``: object cache, Samza's defaults) with the count job's serdes (string keys,
json values); its puts and gets of a cached key should not touch RocksDB or the serdes much.
Raw rocksdict gets the pre-encoded bytes key and value (no serialization) and goes to RocksDB
(the memtable) on every call. Single thread; each phase runs ``--ops`` calls.

    .venv/bin/python -m benchmarks.store_hot --ops 2000000 --json-out out.json

Kept apart from store_micro.py (which measures many distinct keys) so the two can change
independently.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from rocksdict import Rdict

from benchmarks.common import cpu_model
from millpond.serdes import JsonSerde, StringSerde
from millpond.stores import RocksDbEngine, RocksDbOptions, build_store

HOT_KEY = "user-000007"


def _rate(ops: int, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return ops / (time.perf_counter() - start)


def bench_raw(path: Path, ops: int, options: RocksDbOptions) -> dict[str, float]:
    """Raw rocksdict: put then get of the same bytes key, ``ops`` times each."""
    key = HOT_KEY.encode()
    values = [orjson.dumps(i) for i in range(1000)]  # small ints, as a count's values
    db = Rdict(str(path), options.to_rocksdict(), access_type=options.access_type())
    put, get = db.put, db.get

    def puts() -> None:
        for i in range(ops):
            put(key, values[i % 1000])

    def gets() -> None:
        for _ in range(ops):
            get(key)

    def increments() -> None:  # the count job's read-modify-write, raw
        loads, dumps = orjson.loads, orjson.dumps
        for _ in range(ops):
            put(key, dumps(loads(get(key) or b"0") + 1))

    out = {"put_per_s": _rate(ops, puts), "get_per_s": _rate(ops, gets),
           "increment_per_s": _rate(ops, increments)}
    db.close()
    return out


def bench_millpond(path: Path, ops: int, options: RocksDbOptions, cache_size: int,
                   write_batch_size: int) -> dict[str, float]:
    """millpond's store (string key serde, json value serde, object cache) over RocksDB."""
    engine = RocksDbEngine(path, options)
    store = build_store("hot", engine, StringSerde(), JsonSerde(), object_cache_size=cache_size,
                        write_batch_size=write_batch_size)
    key = HOT_KEY
    put, get = store.put, store.get

    def puts() -> None:
        for i in range(ops):
            put(key, i)

    def gets() -> None:
        for _ in range(ops):
            get(key)

    def increments() -> None:  # BenchCounter.process's store calls
        for _ in range(ops):
            put(key, (get(key) or 0) + 1)

    out = {"put_per_s": _rate(ops, puts), "get_per_s": _rate(ops, gets),
           "increment_per_s": _rate(ops, increments)}
    store.flush()
    store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=2_000_000, help="calls per phase")
    parser.add_argument("--cache-size", type=int, default=1000, help="object.cache.size")
    parser.add_argument("--write-batch-size", type=int, default=500, help="write.batch.size")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each")
    parser.add_argument("--json-out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    options = RocksDbOptions()
    raw_runs: list[dict[str, float]] = []
    our_runs: list[dict[str, float]] = []
    for run in range(args.repeat):  # alternate the two so background load hits both alike
        with tempfile.TemporaryDirectory(prefix="millpond-bench-hot-") as tmp:
            raw_runs.append(bench_raw(Path(tmp) / f"raw{run}", args.ops, options))
            our_runs.append(bench_millpond(Path(tmp) / f"millpond{run}", args.ops, options,
                                           args.cache_size, args.write_batch_size))
    metrics = ("put_per_s", "get_per_s", "increment_per_s")
    print(f"one hot key, {args.ops:,} calls per phase, 1 thread, {args.repeat} run(s), "
          f"{cpu_model()} ({os.cpu_count()} CPUs)")
    print(f"{'':28} {'put/s':>12} {'get/s':>12} {'get+put/s':>12}")
    for label, runs in (("raw rocksdict", raw_runs), ("millpond cached store", our_runs)):
        for r in runs:
            print(f"{label:28} " + " ".join(f"{r[m]:12,.0f}" for m in metrics))
    if args.json_out:
        report: dict[str, Any] = {
            "ops": args.ops, "key": HOT_KEY, "cache_size": args.cache_size,
            "write_batch_size": args.write_batch_size, "repeat": args.repeat,
            "serdes": "string keys, json values (ints)", "cpu_model": cpu_model(),
            "nproc": os.cpu_count(), "python": sys.version.split()[0],
            "raw_rocksdict_runs": raw_runs, "millpond_runs": our_runs,
        }
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Micro-benchmark: raw rocksdict put/get vs millpond's store stack over RocksDB.

Single thread, one temp directory per run, same RocksDB options for both (millpond's defaults,
i.e. Samza's). Keys are distinct strings visited in a shuffled order; values are random bytes.
Raw rocksdict gets pre-encoded bytes keys; the millpond store (null-safe -> cached ->
serialized -> engine, as build_store stacks it) gets str keys (string serde) and bytes values
(bytes serde), so its figures include the cache layer and, on misses and write-downs,
serialization. A second pair of rows puts and gets ONE hot key over and over: for millpond
that is the object cache's hit path (a dict lookup, no serde, no RocksDB).

    .venv/bin/python -m benchmarks.store_micro --ops 1000000 --value-size 100 --json-out out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocksdict import Rdict

from benchmarks.common import cpu_model
from millpond.serdes import BytesSerde, StringSerde
from millpond.stores import RocksDbEngine, RocksDbOptions, build_store
from millpond.stores.cached import DEFAULT_OBJECT_CACHE_SIZE, DEFAULT_WRITE_BATCH_SIZE


def _rate(ops: int, fn: Callable[[], None]) -> tuple[float, float]:
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    return ops / elapsed, elapsed


def bench_raw(
    path: Path, keys: list[str], order: list[int], value: bytes, options: RocksDbOptions
) -> dict[str, float]:
    """Raw rocksdict in raw mode: bytes keys prepared up front."""
    bkeys = [k.encode() for k in keys]
    put_keys = [bkeys[i] for i in order]
    get_keys = list(reversed(put_keys))
    db = Rdict(str(path), options.to_rocksdict(), access_type=options.access_type())
    put, get = db.put, db.get

    def puts() -> None:
        for k in put_keys:
            put(k, value)

    def gets() -> None:
        for k in get_keys:
            get(k)

    put_rate, put_secs = _rate(len(put_keys), puts)
    flush_secs = _rate(1, lambda: db.flush(True))[1]
    get_rate, _ = _rate(len(get_keys), gets)
    db.close()
    return {
        "put_per_s": put_rate,
        "put_incl_flush_per_s": len(put_keys) / (put_secs + flush_secs),
        "get_per_s": get_rate,
    }


def bench_millpond(
    path: Path,
    keys: list[str],
    order: list[int],
    value: bytes,
    options: RocksDbOptions,
    cache_size: int,
    write_batch_size: int,
) -> dict[str, float]:
    """build_store(string key serde, bytes value serde, cache) over RocksDbEngine."""
    put_keys = [keys[i] for i in order]
    get_keys = list(reversed(put_keys))
    engine = RocksDbEngine(path, options)
    store = build_store("bench", engine, StringSerde(), BytesSerde(), cache_size, write_batch_size)
    put, get = store.put, store.get

    def puts() -> None:
        for k in put_keys:
            put(k, value)

    def gets() -> None:
        for k in get_keys:
            get(k)

    put_rate, put_secs = _rate(len(put_keys), puts)
    flush_secs = _rate(1, store.flush)[1]
    get_rate, _ = _rate(len(get_keys), gets)
    store.close()
    return {
        "put_per_s": put_rate,
        "put_incl_flush_per_s": len(put_keys) / (put_secs + flush_secs),
        "get_per_s": get_rate,
    }


def bench_hot_key(
    path: Path, ops: int, value: bytes, options: RocksDbOptions, cache_size: int,
    write_batch_size: int,
) -> dict[str, float]:
    """One key put ``ops`` times then got ``ops`` times: raw rocksdict and millpond's stack."""
    db = Rdict(str(path / "raw"), options.to_rocksdict(), access_type=options.access_type())
    raw_put, raw_get, bkey = db.put, db.get, b"hot-key"
    rounds = range(ops)

    def raw_puts() -> None:
        for _ in rounds:
            raw_put(bkey, value)

    def raw_gets() -> None:
        for _ in rounds:
            raw_get(bkey)

    raw_put_rate, _ = _rate(ops, raw_puts)
    raw_get_rate, _ = _rate(ops, raw_gets)
    db.close()
    engine = RocksDbEngine(path / "millpond", options)
    store = build_store("bench", engine, StringSerde(), BytesSerde(), cache_size, write_batch_size)
    put, get, key = store.put, store.get, "hot-key"

    def puts() -> None:
        for _ in rounds:
            put(key, value)

    def gets() -> None:
        for _ in rounds:
            get(key)

    put_rate, _ = _rate(ops, puts)
    get_rate, _ = _rate(ops, gets)
    store.close()
    return {"raw_put_per_s": raw_put_rate, "raw_get_per_s": raw_get_rate,
            "put_per_s": put_rate, "get_per_s": get_rate}


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per metric, the best of the runs (least disturbed by other load on the machine)."""
    return {metric: max(run[metric] for run in runs) for metric in runs[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=1_000_000, help="distinct keys put then got")
    parser.add_argument("--value-size", type=int, default=100, help="value size in bytes")
    parser.add_argument("--cache-size", type=int, default=DEFAULT_OBJECT_CACHE_SIZE,
                        help="object.cache.size")
    parser.add_argument("--write-batch-size", type=int, default=DEFAULT_WRITE_BATCH_SIZE,
                        help="write.batch.size")
    parser.add_argument(
        "--order", choices=("random", "sequential"), default="random", help="key visit order"
    )
    parser.add_argument("--seed", type=int, default=42, help="shuffle seed for key order")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; best is reported")
    parser.add_argument("--json-out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    order = list(range(args.ops))
    if args.order == "random":
        rng.shuffle(order)
    # Keys are allocated in visit order, as a stream would deliver them (fresh objects, laid
    # out in memory in the order they are used), rather than shuffled after allocation.
    keys = [f"key-{i:010d}" for i in order]
    order = list(range(args.ops))
    value = rng.randbytes(args.value_size)
    options = RocksDbOptions()

    raw_runs: list[dict[str, float]] = []
    our_runs: list[dict[str, float]] = []
    hot_runs: list[dict[str, float]] = []
    for run in range(args.repeat):  # alternate the two so background load hits both alike
        with tempfile.TemporaryDirectory(prefix="millpond-bench-") as tmp:
            raw_runs.append(bench_raw(Path(tmp) / f"raw{run}", keys, order, value, options))
            our_runs.append(
                bench_millpond(
                    Path(tmp) / f"millpond{run}",
                    keys,
                    order,
                    value,
                    options,
                    args.cache_size,
                    args.write_batch_size,
                )
            )
            hot_runs.append(
                bench_hot_key(Path(tmp) / f"hot{run}", args.ops, value, options,
                              args.cache_size, args.write_batch_size)
            )
    raw, ours, hot = _best(raw_runs), _best(our_runs), _best(hot_runs)

    rows = [("raw rocksdict", raw), ("millpond store stack", ours)]
    print(
        f"{args.ops:,} ops, {args.value_size}-byte values, {args.order} keys, 1 thread, "
        f"best of {args.repeat}, {cpu_model()} ({os.cpu_count()} CPUs)"
    )
    print(f"{'':28} {'put/s':>12} {'put+flush/s':>12} {'get/s':>12}")
    for label, r in rows:
        print(
            f"{label:28} {r['put_per_s']:12,.0f} {r['put_incl_flush_per_s']:12,.0f} "
            f"{r['get_per_s']:12,.0f}"
        )
    print(
        f"{'millpond / raw':28} {ours['put_per_s'] / raw['put_per_s']:12.2f} "
        f"{ours['put_incl_flush_per_s'] / raw['put_incl_flush_per_s']:12.2f} "
        f"{ours['get_per_s'] / raw['get_per_s']:12.2f}"
    )
    print(f"{'one hot key':28} {'put/s':>12} {'':>12} {'get/s':>12}")
    print(f"{'raw rocksdict':28} {hot['raw_put_per_s']:12,.0f} {'':>12} {hot['raw_get_per_s']:12,.0f}")
    print(f"{'millpond (cache hit)':28} {hot['put_per_s']:12,.0f} {'':>12} {hot['get_per_s']:12,.0f}")

    if args.json_out:
        report: dict[str, Any] = {
            "ops": args.ops,
            "value_size": args.value_size,
            "cache_size": args.cache_size,
            "write_batch_size": args.write_batch_size,
            "order": args.order,
            "seed": args.seed,
            "cpu_model": cpu_model(),
            "nproc": os.cpu_count(),
            "python": sys.version.split()[0],
            "repeat": args.repeat,
            "rocksdb_options": dataclasses.asdict(options),
            "raw_rocksdict": raw,
            "millpond": ours,
            "raw_rocksdict_runs": raw_runs,
            "millpond_runs": our_runs,
            "hot_key": hot,
            "hot_key_runs": hot_runs,
        }
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

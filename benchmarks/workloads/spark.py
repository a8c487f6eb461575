"""The ``spark`` workload: benchmarks/spark_rebuild.py (rebuild a store from its changelog
with Spark; and, as ``spark_rebuild_large``, rebuild and audit a changelog of 1 KB values at
Spark's defaults into RocksDB dirs, issue #36's 2 GB, with peak RSS) and
benchmarks/spark_bootstrap.py (bootstrap a store from Parquet rows)."""

from __future__ import annotations

from typing import Any

from benchmarks.common import summarize
from benchmarks.harness import Harness, say


def spark(h: Harness) -> None:
    a = h.args
    if a.spark_records != 0:
        h.results["spark_rebuild"] = _spark_script(h, "spark_rebuild", "rebuild",
                                                   a.spark_records)
    if a.spark_large_records != 0:
        n = str(a.spark_large_records)
        h.results["spark_rebuild_large"] = _spark_script(
            h, "spark_rebuild", "rebuild + audit (1 KB values)", a.spark_large_records,
            extra={"--keys": n, "--value-bytes": "1024", "--tombstone-rate": "0",
                   "--rocksdb-dirs": "", "--no-parquet": "", "--audit": ""})
    if a.spark_bootstrap_records != 0:
        h.results["spark_bootstrap"] = _spark_script(h, "spark_bootstrap", "bootstrap",
                                                     a.spark_bootstrap_records)


def _spark_script(h: Harness, module: str, what: str, records: int | None,
                  extra: dict[str, str] | None = None) -> dict[str, Any] | None:
    """``--spark-runs`` runs of a Spark benchmark script; its figures summarized.
    ``extra``: more options (a flag with an empty value)."""
    a = h.args
    opts = {"--bootstrap": a.bootstrap, **(extra or {})}
    if records:
        opts["--records"] = str(records)
    runs = []
    for r in range(a.spark_runs):
        got = h.script(module, opts, timeout=1800)
        if got is None:
            break
        runs.append(got)
        rate = got["result"].get("records_per_second")
        say(f"  spark {what} run {r + 1}: {rate} records/s")
    if not runs:
        return None
    numbers: dict[str, list[float]] = {}
    for got in runs:
        for k, v in got["result"].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                numbers.setdefault(k, []).append(v)
    return {"command": runs[0]["command"], "runs": [g["result"] for g in runs],
            "figures": {k: summarize(v) for k, v in numbers.items()}}

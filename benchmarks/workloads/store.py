"""The ``store`` workload: benchmarks/store_micro.py (puts and gets of many keys) and the
hot-key benchmarks/store_hot.py, millpond's store beside raw rocksdict."""

from __future__ import annotations

from benchmarks.common import summarize
from benchmarks.harness import Harness


def store(h: Harness) -> None:
    store_micro(h)
    store_hot(h)


def store_micro(h: Harness) -> None:
    a = h.args
    got = h.script("store_micro", {"--ops": str(a.store_ops), "--value-size": "100",
                                   "--repeat": str(a.runs)}, timeout=1800)
    if got is None:
        return
    res = got["result"]
    for side, key in (("raw_rocksdict", "raw_rocksdict_runs"), ("millpond", "millpond_runs")):
        runs = res.get(key) or ([res[side]] if side in res else [])
        got[side] = {m: summarize([r[m] for r in runs if m in r])
                     for m in ("put_per_s", "put_incl_flush_per_s", "get_per_s")}
    h.results["store_micro"] = got


def store_hot(h: Harness) -> None:
    """Put and get of one hot key: millpond's cached store beside raw rocksdict."""
    a = h.args
    got = h.script("store_hot", {"--ops": str(a.hot_ops), "--repeat": str(a.runs)},
                   timeout=1800)
    if got is None:
        return
    res = got["result"]
    for side in ("raw_rocksdict", "millpond"):
        runs = res.get(f"{side}_runs") or []
        got[side] = {m: summarize([r[m] for r in runs if m in r])
                     for m in ("put_per_s", "get_per_s", "increment_per_s")}
    h.results["store_hot"] = got

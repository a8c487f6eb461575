"""The ``memory-cap`` workload: benchmarks/memory_cap.py, a read-then-write job inside a
cgroup of ``job.container.memory.mb`` (issue #36: 1.6M keys x 1 KB in 384 MB), once per
layout of ``--memcap-layouts`` (tasks x stores per task): build, restart with random
updates, ``millpond restore`` and ``run`` restoring, each phase's peak RSS against the
budget, the state checked exact at the end."""

from __future__ import annotations

from benchmarks.harness import Harness, say


def memory_cap(h: Harness) -> None:
    a = h.args
    out = h.results.setdefault("memory_cap", {})
    for layout in a.memcap_layouts:
        tasks, stores = layout
        got = h.script("memory_cap", {
            "--bootstrap": a.bootstrap, "--keys": str(a.memcap_keys),
            "--cap-mb": str(a.memcap_mb), "--tasks": str(tasks), "--stores": str(stores),
            "--work-dir": str(h.work / f"memory-cap-{tasks}x{stores}"),
            "--report-only": ""}, timeout=4 * 5400)
        if got is None:
            continue
        res = got["result"]
        out[f"{tasks}x{stores}"] = {"command": got["command"], "result": res}
        for prob in res.get("problems", []):
            h.problem(f"memory-cap {tasks}x{stores}: {prob[:800]}")
        for p in res.get("phases", []):
            say(f"  memory cap {tasks}x{stores} {p['phase']}: RSS {p['peak_rss_sum_mb']} MiB "
                f"of {p['budget_mb']:g} MiB, exit {p['returncode']}, oom kills "
                f"{p['oom_kills']}")

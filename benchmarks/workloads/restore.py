"""The restore workloads: ``restore`` (rebuild the count's state from its changelog:
`millpond restore --full` and Quix Streams recovery; `millpond restore --full` of a synthetic
changelog with 1 KB values; benchmarks/restore_scaling.py's peak RSS by changelog size) and
``snapshot-restore`` (benchmarks/snapshot_restore.py: snapshot + changelog tail vs full
changelog replay)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import data, systems
from benchmarks.harness import Harness, say, say_run, summarize_runs


def restore(h: Harness) -> None:
    h.ensure_input()
    assert h.input_topic is not None
    a, ctx = h.args, h.ctx
    if "millpond" in a.system_list and h.millpond_restore_config is None:
        say("restore: running one millpond effectively-once count to make its changelog")
        res = systems.millpond_count(ctx, h.input_topic, a.messages, "effectively-once",
                                     "rs", ctx.reference)
        if res.get("ok") and res.get("correct"):
            h.millpond_restore_config = Path(res["config"])
        else:
            h.problem(f"restore: the millpond source count failed or is WRONG: "
                      f"{str(res.get('error') or res.get('examples'))[:500]}")
    quix = "quix" in a.system_list and h.peer_ready("quix")
    if quix and h.quix_restore_spec is None:
        say("restore: running one Quix at-least-once count to make its changelog")
        res = systems.quix_count(ctx, h.input_topic, a.messages, "at-least-once", "rs",
                                 ctx.reference)
        if res.get("ok") and res.get("correct"):
            h.quix_restore_spec = res["spec"]
        else:
            h.problem(f"restore: the Quix source count failed or is WRONG: "
                      f"{str(res.get('error') or res.get('examples'))[:500]}")
    changelogs = {}
    if h.millpond_restore_config is not None:
        name = h.millpond_restore_config.parent.name
        changelogs["millpond"] = data.topic_size(a.bootstrap, f"{name}-counts-changelog")
    if h.quix_restore_spec is not None:
        group = h.quix_restore_spec["group"]
        topic = next((t for t in data.list_topics(a.bootstrap)
                      if t.startswith("changelog__") and group in t), None)
        if topic:
            changelogs["quix"] = data.topic_size(a.bootstrap, topic)
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(a.runs):
        if h.millpond_restore_config is not None:
            say(f"restore run {r + 1}/{a.runs}: millpond restore --full")
            key = "millpond restore --full"
            res = _millpond_restore(h, h.millpond_restore_config, r, ctx.reference,
                                    changelogs, "millpond")
            runs.setdefault(key, []).append(res)
            say_run(key, res)
        if quix and h.quix_restore_spec is not None:
            say(f"restore run {r + 1}/{a.runs}: Quix Streams recovery on deleted state")
            try:
                res = systems.quix_recover(ctx, h.quix_restore_spec, str(r), ctx.reference)
                cl = changelogs.get("quix")
                if res.get("ok") and cl:
                    res["records"] = cl["records"]
                    res["changelog_bytes"] = cl["bytes"]
                    res["records_per_s"] = cl["records"] / res["restore_s"]
                    res["mb_per_s"] = cl["bytes"] / 1e6 / res["restore_s"]
            except Exception as exc:
                res = {"system": "quix", "ok": False, "error": repr(exc)}
            runs.setdefault("quix recovery", []).append(res)
            say_run("quix recovery", res)
    if "millpond" in a.system_list and a.large_records > 0:
        runs["millpond restore --full (1 KB values)"] = restore_large(h, changelogs)
    if "millpond" in a.system_list and a.restore_sizes:
        got = h.script("restore_scaling", {"--bootstrap": a.bootstrap,
                                           "--sizes": a.restore_sizes}, timeout=3600)
        if got is not None:
            h.results["restore_scaling"] = got
    h.results["restore"] = {key: summarize_runs(rs) for key, rs in runs.items()}
    h.results["restore_changelogs"] = changelogs
    h.report_bad_runs("restore", runs)


def restore_large(h: Harness, changelogs: dict[str, Any]) -> list[dict[str, Any]]:
    """`millpond restore --full` of a synthetic changelog with 1 KB values (MB/s figure)."""
    a, ctx = h.args, h.ctx
    name = f"mpb-{h.salt}-large"
    config = systems.large_restore_config(ctx, name, a.partitions)
    topic = f"{name}-counts-changelog"
    keys = max(1, a.large_records // 2)
    changelog = data.large_changelog(a.large_records, keys, 1000, a.partitions)
    data.create_topic(a.bootstrap, topic, a.partitions, **{"cleanup.policy": "compact"})
    data.produce(a.bootstrap, topic, changelog)
    changelogs["millpond (1 KB values)"] = {"records": changelog.messages,
                                            "bytes": changelog.payload_bytes}
    want = data.final_values(changelog)
    del changelog
    out = []
    for r in range(a.runs):
        say(f"restore run {r + 1}/{a.runs}: millpond restore --full, {a.large_records:,} "
            f"records of 1 KB")
        res = _millpond_restore(h, config, r, want, changelogs, "millpond (1 KB values)")
        out.append(res)
        say_run("millpond restore --full (1 KB values)", res)
    return out


def _millpond_restore(h: Harness, config: Path, r: int, want: dict[str, Any],
                      changelogs: dict[str, Any], changelog: str) -> dict[str, Any]:
    """Run ``r`` of `millpond restore --full` of ``config``'s job, checked against ``want``,
    with its MB/s over ``changelogs[changelog]``."""
    try:
        res = systems.millpond_restore(h.ctx, config, str(r), want)
        if res.get("ok") and res.get("restore_s"):
            cl = changelogs[changelog]
            res["changelog_bytes"] = cl["bytes"]
            res["mb_per_s"] = cl["bytes"] / 1e6 / res["restore_s"]
            res["mb_per_s_value"] = res["value_bytes"] / 1e6 / res["restore_s"]
    except Exception as exc:
        res = {"system": "millpond", "ok": False, "error": repr(exc)}
    return res


def snapshot_restore(h: Harness) -> None:
    """benchmarks/snapshot_restore.py: snapshot + tail vs full changelog replay."""
    a = h.args
    got = h.script("snapshot_restore", {
        "--bootstrap": a.bootstrap, "--records": str(a.snapshot_records),
        "--tail-percent": str(a.snapshot_tail_percent), "--runs": str(a.runs)},
        timeout=7200)
    if got is None:
        return
    if not got["result"].get("stores_equal"):
        h.problem("snapshot-restore: a restored store is WRONG (differs from the job's)")
    h.results["snapshot_restore"] = got

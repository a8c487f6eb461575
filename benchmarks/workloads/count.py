"""The count workloads: ``count`` (per-user count into a changelogged store: millpond at each
guarantee, Quix Streams, Pathway (static read of the topic, persistence on; issue #39), Faust on
a scaled-down topic, and millpond effectively-once once more
with the record undo journal on (``task.dlq.stream`` set, nothing dead-lettered), once more
serving --query-rate gets/s of its store (issue #33), once more with the Prometheus reporter
on and once more with state backups on: their cost), ``skew``
(the same count on a Zipf-keyed topic, with that topic's own ceilings) and ``rss`` (peak RSS
of the millpond count with defaults over many users)."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import data, report, systems
from benchmarks.common import load_average
from benchmarks.harness import Harness, say, say_run, summarize_runs
from benchmarks.workloads.limits import ceiling, ceilings

# The count with the Prometheus reporter on (scraped every second), beside the same count without.
METRICS_KEY = report.METRICS_KEY
# The count with state backups to S3Proxy on, beside the same count without.
BACKUPS_KEY = report.BACKUPS_KEY
# The count with the record undo journal on (task.dlq.stream set), beside the same count without.
UNDO_KEY = report.UNDO_KEY
# The count serving queries (job.query.address set, a driver paced at --query-rate gets/s),
# beside the same count without.
QUERIES_KEY = report.QUERIES_KEY
# The same with the driver on and off in alternating phases: the loss within one run.
QUERY_PHASES_KEY = report.QUERY_PHASES_KEY
# Pathway's count (static read, persistence on): the count workload only.
PATHWAY_KEY = report.PATHWAY_KEY
# millpond's exactly-once count with task.commit.ms unset (100 ms), after the same round's
# exactly-once count at --commit-ms.
EOS_DEFAULT_KEY = report.EOS_DEFAULT_KEY


def count(h: Harness) -> None:
    h.ensure_input()
    assert h.input_topic is not None
    a, ctx = h.args, h.ctx
    runs: dict[str, list[dict[str, Any]]] = {}
    plan = _plan(h, pathway=True)
    faust = "faust" in a.system_list and h.peer_ready("faust")
    small = _faust_topic(h) if faust else None
    eo = ("millpond", "effectively-once")
    for r in range(a.runs):
        # Interleaved rounds: background load on the shared machine hits every system alike.
        # The queries-on run, the undo-journal run (task.dlq.stream set) and the reporter-on
        # run sit right beside the effectively-once run they are compared with (before it in
        # odd rounds, after it in even ones; the queries run nearest, then the undo run), so
        # drifting load hits both; so does the backups-on run.
        def undo_run(r: int = r) -> None:
            # its own tag: the job name (state dir, changelog) must be unique in the run
            # (rss's counts are "u<r>")
            runs.setdefault(UNDO_KEY, []).append(
                _eo_once_more(h, r, UNDO_KEY, f"dlq{r}", lambda: {"dlq": True}))

        def queries_run(r: int = r) -> None:
            if a.query_rate > 0:
                load = {"rate": a.query_rate, "users": a.users, "partitions": a.partitions,
                        "connections": a.query_connections}
                runs.setdefault(QUERIES_KEY, []).append(_eo_once_more(
                    h, r, QUERIES_KEY, f"q{r}", lambda: {"queries": load}))
                # odd rounds start with the load off: which kind of phase meets which moment
                phased = {**load, "phase_s": a.query_phase_s, "off_first": r % 2 == 1}
                runs.setdefault(QUERY_PHASES_KEY, []).append(_eo_once_more(
                    h, r, QUERY_PHASES_KEY, f"qp{r}", lambda: {"queries": phased}))

        def metrics_run(r: int = r) -> None:
            runs.setdefault(METRICS_KEY, []).append(
                _eo_once_more(h, r, METRICS_KEY, f"m{r}", lambda: {"metrics": True}))
            if a.backup_interval_ms >= 0:
                runs.setdefault(BACKUPS_KEY, []).append(
                    _eo_once_more(h, r, BACKUPS_KEY, f"b{r}",
                                  lambda: {"backups": _s3_backups(h)}))

        first = r % 2 == 1

        def beside(first: bool = first) -> None:
            # the queries and undo-journal runs next to the effectively-once run on either side
            for step in ((metrics_run, undo_run, queries_run) if first
                         else (queries_run, undo_run, metrics_run)):
                step()

        for key, res in _count_round(h, r, plan, h.input_topic, a.messages, ctx.reference,
                                     str(r), beside_eo=(beside if eo in plan else None),
                                     before=first):
            if res.get("correct") and key == "millpond effectively-once":
                h.millpond_restore_config = Path(res["config"])
            if res.get("correct") and key == "quix at-least-once":
                h.quix_restore_spec = res["spec"]
            runs.setdefault(key, []).append(res)
            if key == "millpond exactly-once":
                runs.setdefault(EOS_DEFAULT_KEY, []).append(_eo_once_more(
                    h, r, EOS_DEFAULT_KEY, f"dc{r}", lambda: {"default_commit": True},
                    "exactly-once"))
        if small is not None and r < a.faust_runs:
            topic, n, reference = small
            for system in ("faust", "millpond"):
                key = f"{system} at-least-once (small topic)"
                say(f"count run {r + 1}/{a.faust_runs}: {key} on {n:,} msgs")
                try:
                    if system == "faust":
                        settings = ({"producer_linger_ms": a.faust_linger_ms}
                                    if a.faust_linger_ms >= 0 else None)
                        res = systems.faust_count(ctx, topic, n, a.partitions, str(r),
                                                  reference, settings)
                    else:
                        res = systems.millpond_count(ctx, topic, n, "at-least-once", f"fp{r}",
                                                     reference)
                except Exception as exc:
                    res = _failed(system, "at-least-once", exc)
                runs.setdefault(key, []).append(res)
                say_run(key, res)
    h.results["count"] = {key: summarize_runs(rs) for key, rs in runs.items()}
    h.report_bad_runs("count", runs)


def _faust_topic(h: Harness) -> tuple[str, int, dict[str, int]]:
    """Faust's scaled-down input topic: (topic, messages, reference)."""
    assert h.dataset is not None
    a = h.args
    n = min(a.faust_messages, a.messages)
    # Scaled down, not a prefix: the same generator with the same messages per user.
    users = max(1, round(a.users * n / a.messages))
    subset = data.make_dataset(n, users, a.partitions)
    topic = f"millpond-bench-input-small-{h.salt}"
    data.create_topic(a.bootstrap, topic, a.partitions)
    h.topics.append(topic)
    data.produce(a.bootstrap, topic, subset)
    h.results["faust_input"] = {"topic": topic, "messages": n, "users": users,
                                "partitions": a.partitions}
    return topic, n, subset.reference()


def _failed(system: str, guarantee: str, exc: Exception) -> dict[str, Any]:
    """The result of a count run that raised ``exc`` (called while handling it)."""
    return {"system": system, "guarantee": guarantee, "ok": False,
            "error": f"{exc!r}\n{traceback.format_exc()[-1500:]}"}


def _eo_once_more(h: Harness, r: int, key: str, tag: str,
                  options: Callable[[], dict[str, Any]],
                  guarantee: str = "effectively-once") -> dict[str, Any]:
    """Round ``r``'s effectively-once (or ``guarantee``'s) count once more with
    ``options()`` of systems.millpond_count: with the record undo journal on (UNDO_KEY: a
    dead-letter topic set), serving paced queries of its store (QUERIES_KEY), with the
    Prometheus reporter on and scraped every second (METRICS_KEY), with state backups to
    S3Proxy on (BACKUPS_KEY), or exactly-once with task.commit.ms unset (EOS_DEFAULT_KEY);
    their cost is the ratio to the same round's run without."""
    a, ctx = h.args, h.ctx
    assert h.input_topic is not None
    say(f"count run {r + 1}/{a.runs}: {key} on {a.messages:,} msgs "
        f"(load {load_average()})")
    try:
        res = systems.millpond_count(ctx, h.input_topic, a.messages, guarantee,
                                     tag, ctx.reference, **options())
    except Exception as exc:
        res = _failed("millpond", guarantee, exc)
    say_run(key, res)
    return res


def _s3_backups(h: Harness) -> dict[str, str]:
    """``job.state.backup.*`` properties of an S3Proxy this run starts (once)."""
    if h.s3 is None:
        import s3fs

        from millpond.dev.s3 import LocalS3

        h.s3 = LocalS3(h.work / "s3", port=systems.free_port())
        say(f"starting S3Proxy on {h.s3.endpoint} for the backups-on count")
        h.s3.start(timeout=120)
        s3fs.S3FileSystem(**h.s3.storage_options(), skip_instance_cache=True).call_s3(
            "create_bucket", Bucket="millpond-bench")
    opts = h.s3.storage_options()
    return {"job.state.backup.uri": "s3://millpond-bench/count",
            "job.state.backup.interval.ms": str(h.args.backup_interval_ms),
            "job.state.backup.options.key": opts["key"],
            "job.state.backup.options.secret": opts["secret"],
            "job.state.backup.options.client_kwargs.endpoint_url":
                opts["client_kwargs"]["endpoint_url"],
            "job.state.backup.options.client_kwargs.region_name": "us-east-1"}


def _plan(h: Harness, pathway: bool = False) -> list[tuple[str, str]]:
    """(system, guarantee) of one round of counts: millpond's three, then Quix's two, then
    (with ``pathway``: the count workload) Pathway's one."""
    a = h.args
    plan: list[tuple[str, str]] = []
    if "millpond" in a.system_list:
        plan += [("millpond", g) for g in systems.MILLPOND_GUARANTEES]
    if "quix" in a.system_list and h.peer_ready("quix"):
        plan += [("quix", g) for g in systems.QUIX_GUARANTEES]
    if pathway and "pathway" in a.system_list and h.peer_ready("pathway"):
        plan.append(("pathway", "static, persistence on"))
    return plan


def _count_round(h: Harness, r: int, plan: list[tuple[str, str]], topic: str, messages: int,
                 reference: dict[str, int], tag: str, label: str = "",
                 beside_eo: Callable[[], None] | None = None,
                 before: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """Round ``r``: one verified count of ``topic`` by each (system, guarantee) of ``plan``
    (the peers only in the first --peer-runs rounds); ``beside_eo`` runs right
    before (``before``) or after millpond's effectively-once count."""
    a, ctx = h.args, h.ctx
    out = []
    for system, guarantee in plan:
        if system != "millpond" and r >= a.peer_runs:
            continue
        is_eo = (system, guarantee) == ("millpond", "effectively-once")
        if is_eo and beside_eo is not None and before:
            beside_eo()
        key = PATHWAY_KEY if system == "pathway" else f"{system} {guarantee}"
        say(f"{label or 'count'} run {r + 1}/{a.runs}: {key} on {messages:,} msgs "
            f"(load {load_average()})")
        try:
            if system == "millpond":
                res = systems.millpond_count(ctx, topic, messages, guarantee, tag, reference)
            elif system == "pathway":
                res = systems.pathway_count(ctx, topic, messages, tag, reference)
            else:
                res = systems.quix_count(ctx, topic, messages, guarantee, tag, reference)
        except Exception as exc:
            res = _failed(system, guarantee, exc)
        say_run(key, res)
        out.append((key, res))
        if is_eo and beside_eo is not None and not before:
            beside_eo()
    return out


def skew(h: Harness) -> None:
    """The count on Zipf-distributed keys, with that topic's own ceilings, millpond at each
    guarantee and Quix Streams, in interleaved rounds."""
    a = h.args
    say(f"generating {a.skew_messages:,} messages over {a.skew_users:,} Zipf-ranked users "
        f"(exponent {a.skew_exponent}, seed {a.seed})")
    began = time.perf_counter()
    dataset = data.make_dataset(a.skew_messages, a.skew_users, a.partitions,
                                zipf=a.skew_exponent, seed=a.seed)
    reference = dataset.reference()
    described = dataset.describe(reference)
    described["generate_s"] = round(time.perf_counter() - began, 1)
    say(f"skewed input: {described['distinct_users']:,} distinct users, the hottest has "
        f"{described['hottest_user_share']:.1%} of the messages, the top 100 "
        f"{described['top_100_users_share']:.1%} (generated in {described['generate_s']} s)")
    topic = h.topic("skewed", dataset)
    del dataset  # the reference is all the runs need
    h.results["skew"] = {"input": {"topic": topic, **described}}
    plan = _plan(h)
    consume: list[dict[str, Any]] = []
    consume_json: list[dict[str, Any]] = []
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(a.runs):
        consume.append(ceiling(h, topic))
        consume_json.append(ceiling(h, topic, decode_json=True))
        say(f"skew ceilings run {r + 1}: consume {consume[-1]['msgs_per_s']:,.0f} msg/s, "
            f"consume+orjson {consume_json[-1]['msgs_per_s']:,.0f} msg/s")
        for key, res in _count_round(h, r, plan, topic, a.skew_messages, reference, f"z{r}",
                                     "skew"):
            runs.setdefault(key, []).append(res)
    h.results["skew"].update({
        "limits": {**ceilings(h, consume, consume_json, a.skew_messages),
                   "runs": {"consume": consume, "consume_json": consume_json}},
        "count": {key: summarize_runs(rs) for key, rs in runs.items()},
    })
    h.report_bad_runs("skew", runs)


def rss(h: Harness) -> None:
    """Peak RSS (and speed) of the millpond count with defaults (effectively-once) on a
    uniform topic over --rss-users users."""
    a = h.args
    if "millpond" not in a.system_list:
        return
    say(f"generating {a.rss_messages:,} messages over {a.rss_users:,} users (uniform)")
    dataset = data.make_dataset(a.rss_messages, a.rss_users, a.partitions)
    reference = dataset.reference()
    described = dataset.describe(reference)
    topic = h.topic("users", dataset)
    del dataset
    h.results["rss"] = {"input": {"topic": topic, **described}}
    key = "millpond effectively-once"
    runs: list[dict[str, Any]] = []
    for r in range(a.runs):
        for _, res in _count_round(h, r, [("millpond", "effectively-once")], topic,
                                   a.rss_messages, reference, f"u{r}", "rss"):
            runs.append(res)
    h.results["rss"]["count"] = {key: summarize_runs(runs)}
    h.report_bad_runs("rss", {key: runs})

"""The ``sessions`` workload (issue #30: "Session windows over 1M users: peak RSS stays within
1.5x of the tumbling run"): millpond's session-window count per user (``benchmarks.jobs:
session_app``, gap SESSION_GAP_MS = 30 minutes, final results) beside its 1-minute tumbling
count per user (``window_app``, the windows workload's job) on one topic of page views over
``--rss-users`` users (1M; --quick 10k), each run ``millpond run --bounded`` with defaults,
its output checked exactly against a reference computed from the generated data, and its
peak RSS (VmHWM, polled) compared: the target is sessions <= 1.5x tumbling, per round. Each
round runs the pair at the default budget, then (``--sessions-memory-mb``, 256) both jobs at
that ``job.container.memory.mb``, a container's budget, with a target row of its own.

**The data.** ``--messages`` page views (2M), each user exactly messages/users times (2 at
1M users), event time ``ts`` in the value from TS0 to TS0 + SPAN_MS in message order, as the
windows workload's (so each partition's ``ts`` only grows: grace 0 and nothing is late,
neither for the tumbling windows nor for the sessions), plus the same flush record per
partition an hour of event time past the data (``flush-<p>``; it closes every window and
session of the data; its own stays open and the checks leave the flush keys out). Unlike the
bench's other topics the users come in a **seeded shuffle** (``--seed``), not the fixed walk:
with the walk a user's records are exactly ``users`` messages apart, so at 2 records a user
every user's gap is SPAN_MS / 2 and every user's two records are in one session or none is.
Shuffled, the gap between a user's two records is the distance of two uniform points of the
span (density 2(1 - x) of the span's fraction x).

**Span and gap.** SPAN_MS = 2 hours and a 30-minute gap (the usual web-analytics inactivity
timeout): a user's two records are one session when they are less than a quarter of the span
apart, 1 - (3/4)^2 = 44% of users; the others have two sessions of one record (at 2M / 1M,
~1.56M sessions in all). The tumbling count has 120 one-minute windows, ~17k records each.
What that means for memory: a session stays open 30 minutes of event time after its last
record, so ~40% of the users (~400k, ~100k per task) have an open session at a time (one
store entry per user: its open sessions and their states), where the
tumbling count holds the last minute's ~17k windows. The 1.5x target is about how far that
open state (larger by ~50x in entries) moves the process's peak RSS, which the store's
bounded caches (RocksDB's block cache, the object cache's entries and bytes) should cap.

**The session reference.** The operator (millpond/streams/window_ops.py ``session_window``)
joins a record at ``t`` to a session ``[start, end]`` when ``start - gap < t < end + gap``;
in time order: a user's sorted times split where two consecutive ones are ``>= gap`` apart.
Each session's result is ``{"start": its first record's time, "end": its last's, "value":
its records}``, sent when stream time reaches ``end + gap`` (grace 0).
"""

from __future__ import annotations

import random
import statistics
from typing import Any

import orjson

from benchmarks import data, jobs
from benchmarks.common import load_average
from benchmarks.harness import Harness, say, say_run, summarize_runs
from benchmarks.workloads.count import _failed
from benchmarks.workloads.windows import (
    FLUSH,
    FLUSH_AHEAD_MS,
    millpond_windows,
    reference,
)

SPAN_MS = 2 * 3_600_000  # the data's event time span (2 hours)
GAP_MS = jobs.SESSION_GAP_MS  # 30 minutes

TUMBLING = "millpond dataflow tumbling 1-minute count (effectively-once)"
SESSIONS = "millpond dataflow session count, 30-minute gap (effectively-once)"
ORDER = [TUMBLING, SESSIONS]
BUDGET = "job.container.memory.mb"
RSS_FACTOR = 1.5  # issue #30: sessions' peak RSS <= 1.5x the tumbling run's


def _at(key: str, mb: int | None) -> str:
    """The run row of ``key`` at budget ``mb`` (None: the default budget, the key itself)."""
    return key if mb is None else f"{key}, {BUDGET}={mb}"


def session_dataset(messages: int, users: int, partitions: int, seed: int) -> data.Dataset:
    """Page views with ``ts`` over SPAN_MS in message order, each user ``messages // users``
    times (the first ``messages % users`` once more) in a seeded shuffle, and one flush
    record a partition an hour past the data."""
    picks = [i % users for i in range(messages)]
    random.Random(seed).shuffle(picks)
    names: dict[int, tuple[str, bytes]] = {}
    records: list[tuple[bytes, bytes, int]] = []
    append, page_view = records.append, data.page_view
    for i, u in enumerate(picks):
        name = names.get(u)
        if name is None:
            user = f"user-{u:06d}"
            name = names[u] = (user, user.encode())
        ts = data.TS0 + i * SPAN_MS // messages
        append((name[1], page_view(i, name[0], ts).encode(), u % partitions))
    ts = data.TS0 + SPAN_MS + FLUSH_AHEAD_MS
    for p in range(partitions):
        key = f"{FLUSH}{p}"
        records.append((key.encode(), page_view(messages + p, key, ts).encode(), p))
    return data.Dataset(len(records), users, partitions, records, seed=seed)


def session_reference(ds: data.Dataset, gap: int = GAP_MS) -> dict[str, list[int]]:
    """Every user's session of the data: ``"<user>|<start>" -> [end, count]`` (flush keys
    out); a user's sorted times split where two consecutive ones are ``>= gap`` apart."""
    times: dict[str, list[int]] = {}
    for key, value, _ in ds.records:
        user = key.decode()
        if not user.startswith(FLUSH):
            times.setdefault(user, []).append(orjson.loads(value)["ts"])
    out: dict[str, list[int]] = {}
    for user, ts in times.items():
        ts.sort()
        start = prev = ts[0]
        n = 0
        for t in ts:
            if t - prev >= gap:
                out[f"{user}|{start}"] = [prev, n]
                start, n = t, 0
            prev, n = t, n + 1
        out[f"{user}|{start}"] = [prev, n]
    return out


def targets(runs: dict[str, list[dict[str, Any]]],
            budgets: tuple[int | None, ...] = (None,)) -> list[dict[str, Any]]:
    """Per round and budget: the session run's peak RSS over the tumbling run's at the same
    budget (goal <= RSS_FACTOR)."""
    return [_target(runs, mb) for mb in budgets]


def _target(runs: dict[str, list[dict[str, Any]]], mb: int | None) -> dict[str, Any]:
    rounds = []
    for s, t in zip(runs.get(_at(SESSIONS, mb)) or [], runs.get(_at(TUMBLING, mb)) or [],
                    strict=False):
        if all(r.get("ok") and r.get("correct") and r.get("maxrss_mb") for r in (s, t)):
            rounds.append({"ratio": s["maxrss_mb"] / t["maxrss_mb"],
                           "sessions_mb": s["maxrss_mb"], "tumbling_mb": t["maxrss_mb"]})
    median = statistics.median(r["ratio"] for r in rounds) if rounds else None
    where = ("both at the default budget" if mb is None
             else f"both at {BUDGET}={mb}")
    return {"target": f"millpond session windows peak RSS <= {RSS_FACTOR:g}x tumbling ({where})",
            "goal": RSS_FACTOR, "rounds": rounds, "median": median, "budget_mb": mb,
            "status": ("missing" if median is None
                       else "pass" if median <= RSS_FACTOR else "miss")}


def sessions(h: Harness) -> None:
    a = h.args
    users = a.rss_users
    say(f"sessions: generating {a.messages:,} messages over {users:,} users (shuffled, seed "
        f"{a.seed}), ts over {SPAN_MS // 60_000} min, + {a.partitions} flush records")
    ds = session_dataset(a.messages, users, a.partitions, a.seed)
    want = {TUMBLING: reference(ds), SESSIONS: session_reference(ds)}
    topic = h.topic("sessions", ds)
    joined = sum(1 for _, n in want[SESSIONS].values() if n > 1)
    h.results["sessions"] = {
        "input": {"topic": topic, "messages": ds.messages, "users": users,
                  "partitions": a.partitions, "span_ms": SPAN_MS, "seed": a.seed,
                  "key_order": "seeded shuffle, each user messages/users times",
                  "flush_records": a.partitions, "flush_ts_ahead_ms": FLUSH_AHEAD_MS,
                  "window_ms": jobs.WINDOW_MS, "gap_ms": GAP_MS, "grace_ms": 0,
                  "windows_expected": len(want[TUMBLING]),
                  "sessions_expected": len(want[SESSIONS]),
                  "sessions_of_more_than_one_record": joined,
                  "event_time": "the value's ts field (ms)"},
    }
    say(f"sessions: {len(want[TUMBLING]):,} tumbling windows and {len(want[SESSIONS]):,} "
        f"sessions expected ({joined:,} of more than one record)")
    apps = {TUMBLING: "window_app", SESSIONS: "session_app"}
    runs: dict[str, list[dict[str, Any]]] = {}
    # Each pair at the default budget, then (--sessions-memory-mb) both jobs at a container's
    # budget: the tumbling job never fills its caches, the session job's ~400k open sessions
    # fill what its budget gives them (object caches, RocksDB's block cache and memtables).
    budgets: tuple[int | None, ...] = (None,) + ((a.sessions_memory_mb,)
                                                 if a.sessions_memory_mb else ())
    for r in range(a.runs):
        for mb in budgets:
            extra = {} if mb is None else {BUDGET: mb}
            for key in (ORDER if r % 2 == 0 else ORDER[::-1]):
                row = _at(key, mb)
                say(f"sessions run {r + 1}/{a.runs}: {row} on {ds.messages:,} msgs "
                    f"(load {load_average()})")
                tag = f"s{r}k{ORDER.index(key)}" + ("" if mb is None else f"m{mb}")
                try:
                    res = millpond_windows(h, topic, ds.messages, tag, want[key],
                                           app=apps[key], extra=extra)
                except Exception as exc:
                    res = _failed("millpond", "sessions", exc)
                say_run(row, res)
                runs.setdefault(row, []).append(res)
    h.results["sessions"].update({
        "runs": {key: summarize_runs(rs) for key, rs in runs.items()},
        "targets": targets(runs, budgets),
    })
    for t in h.results["sessions"]["targets"]:
        med = f"{t['median']:.2f}x" if t["median"] is not None else "-"
        per = ", ".join(f"{x['sessions_mb']:.0f} / {x['tumbling_mb']:.0f} MB"
                        for x in t["rounds"])
        say(f"sessions target {t['target']}: {med} ({t['status']}; per round {per})")
    h.report_bad_runs("sessions", runs)

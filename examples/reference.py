"""Plain-Python references for the example jobs: what each job must output and keep in state.

No millpond and no Kafka here: each function takes the generated records
(``examples.generate.Record``) in the order they were produced and computes the jobs' results
the simple way. Tests and the demo compare the jobs' real outputs and stores against them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from examples.generate import Record


def by_partition(records: Iterable[Record]) -> dict[int, list[Record]]:
    parts: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        parts[r.partition].append(r)
    return parts


# ---- 1. windowed aggregation ------------------------------------------------------------------

@dataclass
class HourlyResult:
    closed: dict[str, int]  # "<hour>|<user>" -> views, for hours the job has emitted
    open: dict[str, int]  # "<hour>|<user>" -> views still counting (the hourly-counts store)
    watermarks: dict[int, int]  # partition -> largest timestamp seen
    late: int  # views dropped because their hour had closed

    def per_user(self) -> Counter[str]:
        """Views per user over all hours (closed and open), late views excluded."""
        total: Counter[str] = Counter()
        for key, n in (*self.closed.items(), *self.open.items()):
            total[key.split("|", 1)[1]] += n
        return total


def hour_key(window: int, window_ms: int) -> str:
    """Window number -> its start as ``YYYY-MM-DDTHH`` (``...THH:MM`` for sub-hour windows)."""
    start = datetime.fromtimestamp(window * window_ms / 1000, UTC)
    return start.strftime("%Y-%m-%dT%H" if window_ms % 3_600_000 == 0 else "%Y-%m-%dT%H:%M")


def hourly_counts(views: Iterable[Record], window_ms: int = 3_600_000,
                  grace_ms: int = 300_000) -> HourlyResult:
    """Per partition, in order: count views per (hour, user); an hour closes once the largest
    timestamp seen passes its end + grace; views for a closed hour are dropped as late."""
    result = HourlyResult({}, {}, {}, 0)
    for partition, records in by_partition(views).items():
        counts: Counter[str] = Counter()
        wm: int | None = None
        for r in records:
            assert r.value is not None
            ts = r.value["timestamp"]
            window = ts // window_ms
            if wm is not None and window < (wm - grace_ms) // window_ms:
                result.late += 1
                continue
            counts[f"{hour_key(window, window_ms)}|{r.value['user_id']}"] += 1
            wm = ts if wm is None else max(wm, ts)
        assert wm is not None
        result.watermarks[partition] = wm
        bound = hour_key((wm - grace_ms) // window_ms, window_ms)
        for key, n in counts.items():
            (result.closed if key < bound else result.open)[key] = n
    return result


# ---- 2. table-table join ----------------------------------------------------------------------

@dataclass
class TableJoinResult:
    profiles: dict[str, Any]  # the profiles store: user_id -> latest profile
    settings: dict[str, Any]  # the settings store
    joined: dict[str, Any]  # output key -> latest value (None: tombstone)
    changes: Counter[str]  # output records per user_id (one per input change)


def table_join(profiles: Iterable[Record], settings: Iterable[Record]) -> TableJoinResult:
    """Latest row of each table per user, and their (outer) join; a tombstone when both are
    gone. Each user's changes of one table are applied in order, so the end state does not
    depend on how the two tables' changes interleave."""
    tables: dict[str, dict[str, Any]] = {"profile": {}, "settings": {}}
    changes: Counter[str] = Counter()
    for name, records in (("profile", profiles), ("settings", settings)):
        for r in records:
            changes[r.key] += 1
            if r.value is None:
                tables[name].pop(r.key, None)
            else:
                tables[name][r.key] = r.value
    joined: dict[str, Any] = {}
    for user in changes:
        p, s = tables["profile"].get(user), tables["settings"].get(user)
        joined[user] = None if p is None and s is None else {
            "user_id": user, "profile": p, "settings": s}
    return TableJoinResult(tables["profile"], tables["settings"], joined, changes)


# ---- 3. stream-table join ---------------------------------------------------------------------

@dataclass
class EnrichResult:
    zips: dict[str, str]  # the user-zips store
    pending: dict[str, Any]  # the pending-views store: "<user>|<view_id>" -> view
    enriched: dict[str, Any] = field(default_factory=dict)  # view_id -> the view with "zip"


def zip_enrichment(batches: Sequence[tuple[Iterable[Record], Iterable[Record]]]) -> EnrichResult:
    """Apply (profiles, views) batches in turn: a view gets its user's ZIP code, or waits until
    the user's profile arrives. Within a batch the job may see profiles and views interleaved
    either way; the batches the tests build keep the result independent of that (a user with
    views in a batch either keeps the ZIP code it had, or gets its first profile)."""
    result = EnrichResult({}, {})
    for profiles, views in batches:
        for r in profiles:
            if r.value is None:
                result.zips.pop(r.key, None)
                continue
            result.zips[r.key] = r.value["zip"]
            for key in [k for k in result.pending if k.split("|", 1)[0] == r.key]:
                view = result.pending.pop(key)
                result.enriched[view["view_id"]] = {**view, "zip": r.value["zip"]}
        for r in views:
            view = r.value
            assert view is not None
            zip_code = result.zips.get(view["user_id"])
            if zip_code is None:
                result.pending[f"{view['user_id']}|{view['view_id']}"] = view
            else:
                result.enriched[view["view_id"]] = {**view, "zip": zip_code}
    return result


# ---- 4. stream-stream join --------------------------------------------------------------------

@dataclass
class AdJoinResult:
    joined: dict[str, Any]  # impression_id -> joined record (the output)
    impressions: dict[str, Any]  # the impressions store after the final purge
    clicks: dict[str, Any]  # the clicks store
    expiry: dict[int, dict[str, Any]]  # partition -> the join-expiry store of that task


def ad_join(impressions: Iterable[Record], clicks: Iterable[Record], window_ms: int = 600_000,
            lateness_ms: int = 60_000) -> AdJoinResult:
    """An impression and a click with the same id join if at most ``window_ms`` apart.
    Unjoined events stay buffered until the other stream's watermark (largest timestamp in
    the partition) minus ``lateness_ms`` is more than ``window_ms`` past them."""
    imps = {r.key: r for r in impressions}
    clks = {r.key: r for r in clicks}
    result = AdJoinResult({}, {}, {}, defaultdict(dict))
    watermarks: dict[tuple[str, int], int] = {}
    for kind, records in (("impression", imps), ("click", clks)):
        for r in records.values():
            k = (kind, r.partition)
            watermarks[k] = max(watermarks.get(k, r.timestamp), r.timestamp)
    for (kind, partition), wm in watermarks.items():
        result.expiry[partition][f"watermark|{kind}"] = wm
    for imp_id, imp in imps.items():
        click = clks.get(imp_id)
        if click is not None and abs(click.timestamp - imp.timestamp) <= window_ms:
            i, c = imp.value, click.value
            assert i is not None and c is not None
            result.joined[imp_id] = {
                "impression_id": imp_id, "ad_id": i["ad_id"], "user_id": i["user_id"],
                "placement": i["placement"], "impression_ts": i["timestamp"],
                "click_id": c["click_id"], "click_ts": c["timestamp"],
                "delay_ms": c["timestamp"] - i["timestamp"]}
    for kind, records, store in (("impression", imps, result.impressions),
                                 ("click", clks, result.clicks)):
        other = "click" if kind == "impression" else "impression"
        for imp_id, r in records.items():
            if imp_id in result.joined:
                continue
            other_wm = watermarks.get((other, r.partition))
            if other_wm is not None and other_wm - lateness_ms - window_ms > r.timestamp:
                continue  # purged
            store[imp_id] = r.value
            result.expiry[r.partition][f"{kind}|{r.timestamp:013d}|{imp_id}"] = imp_id
    return result

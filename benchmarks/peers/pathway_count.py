"""Pathway side of the stateful-count benchmark (runs inside the Pathway virtualenv).

    python pathway_count.py count SPEC.json   # count the topic per user, to its end, then stop
    python pathway_count.py dump  SPEC.json   # read the output file back: {user: count}
    python pathway_count.py latency SPEC.json # streaming count, each update to a topic, until SIGTERM

SPEC.json holds bootstrap, topic, group, state_dir (persistence), output (the JSON-lines
file the counts are written to), snapshot_interval_ms, messages and out (where this writes
its JSON report).

The dataflow is Pathway's own idiom for the count: ``pw.io.kafka.read(..., format="json",
schema=..., mode="static")`` (static: the data in the topic when the reader starts, then the
reader finishes and ``pw.run()`` returns), ``groupby(user_id).reduce(count=count())`` and
``pw.io.jsonlines.write`` of the counts table, in one process with Pathway's default of one
worker thread (its Kafka reader and JSON parser run in a connector thread of their own).
Persistence is on: ``pw.persistence.Config(Backend.filesystem(state_dir),
snapshot_interval_ms=5000)`` (the other systems' commit interval), in Pathway's default
mode, ``PERSISTING``: the rows the reader parsed and the Kafka offsets are written to the
state dir, from which a restart resumes. That mode needs no licence key and runs offline
(Pathway 0.33); ``OPERATOR_PERSISTING`` (its operators' state, nearer to millpond's
changelogged store) refuses to run without one ("the feature(s) you used
["FULL-PERSISTENCE"] require a Pathway license key, which is free"), so it is not used.
The schema names the one field the count needs, ``user_id``; Pathway's parser reads each
whole JSON value and takes that field from it.

Pathway's reader hands what it read to the engine in minibatches (one per
``autocommit_duration_ms``, its default 1.5 s, here too; a topic read within that is one
minibatch), and the counts reach the output only once a minibatch has been processed: in a
1M-message run its first output came 5 s after the read began, of 8.3 s, and at 20k
messages only at the very end. An ``on_change`` callback of ``pw.io.subscribe`` would thus
mark the end of the first minibatch, seconds after the first message, so it cannot mark the
first message. What this script records as ``first_message`` is when the input connector starts
reading the topic: the ``created`` time (the wall clock, taken in this process) of the
engine's log record "Seek the data source to the reconstructed frontier ..." (Pathway's
Rust logs reach Python's ``logging`` through pyo3-log), which the connector thread writes
right before its first read of Kafka: after the interpreter start, ``import pathway``, the
graph build and the set-up of its Kafka reader, as the other systems' first message comes
after their start-up and group join. The first fetch is sent right after that record and
its records arrive one round trip later (on the local broker, librdkafka's fetch debug log
put them 3 ms after it in a trial), so this counts a few milliseconds more of processing
for Pathway than it had, never less. Should that log line be missing (another version), the
"Realtime data starts from the time T" record the worker writes when the connector's
realtime reading begins is used instead. A per-row UDF or subscription on the input would
mark the first row exactly but run Python for every message in a Rust engine, so it was
not used.

``ended`` is the wall clock after ``pw.run()`` returned: the counts written and flushed, the
last snapshot persisted. The output holds Pathway's update stream (``diff`` +1 / -1 rows
with their ``time``); ``dump`` replays it into each key's final count, and a key left with
anything but one count is reported as such (the harness then finds the counts WRONG).
"""

from __future__ import annotations

import json
import logging
import resource
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# The engine's log records that mark the start of the connector's reading, first choice first.
READ_STARTS = ("Seek the data source to the reconstructed frontier",
               "Realtime data starts from the time")


def _usage() -> dict[str, float]:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": u.ru_utime + u.ru_stime, "maxrss_mb": u.ru_maxrss / 1024}


class ReadStart(logging.Handler):
    """Notes the time of the first log record of each READ_STARTS message."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        for mark in READ_STARTS:
            if mark not in self.seen and msg.startswith(mark):
                self.seen[mark] = record.created

    @property
    def first_message(self) -> float | None:
        """The read start: the first choice of READ_STARTS seen, else the next."""
        return next((self.seen[m] for m in READ_STARTS if m in self.seen), None)

    @property
    def marker(self) -> str | None:
        return next((m for m in READ_STARTS if m in self.seen), None)


def count(spec: dict[str, Any]) -> dict[str, Any]:
    started = time.time()
    marks = ReadStart()
    # Pathway's own handler (default_logging) would be skipped once a handler is set: its
    # format on stderr (the run's log) and ours beside it.
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter("[%(asctime)s]:%(levelname)s:%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[stderr, marks], force=True)

    import pathway as pw

    class PageView(pw.Schema):
        user_id: str

    settings = {"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                "auto.offset.reset": "earliest", "session.timeout.ms": "6000"}
    views = pw.io.kafka.read(settings, topic=spec["topic"], format="json", schema=PageView,
                             mode="static", name="page_views")
    counts = views.groupby(pw.this.user_id).reduce(pw.this.user_id,
                                                   count=pw.reducers.count())
    pw.io.jsonlines.write(counts, spec["output"])
    persistence = pw.persistence.Config(
        pw.persistence.Backend.filesystem(spec["state_dir"]),
        snapshot_interval_ms=int(spec.get("snapshot_interval_ms", 5000)))
    imported = time.time()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE, default_logging=False,
           persistence_config=persistence)
    ended = time.time()
    return {"started": started, "graph_built": imported, "first_message": marks.first_message,
            "first_message_marker": marks.marker, "read_marks": marks.seen, "ended": ended,
            **_usage()}


def latency(spec: dict[str, Any]) -> dict[str, Any]:
    """The latency workload (benchmarks/workloads/latency.py): ``pw.io.kafka.read`` in
    streaming mode (a fresh group from the topic's beginning, ``autocommit_duration_ms`` of
    the spec: Pathway's minibatch), ``groupby(user_id).reduce(user, count=count(),
    seq=max(seq), ts_ms=max(ts_ms))`` and ``pw.io.kafka.write`` of that table (JSON) to the
    output topic under the user, persistence on with a snapshot every ``snapshot_interval_ms``.

    The output is Pathway's update stream: a key's new row (``"diff": 1``) and the
    retraction of its previous one (``"diff": -1``, the old seq), each with ``time``; the
    harness's reader counts only the insertions of this system. A key's row carries the
    latest record's ``seq`` and ``ts_ms`` (a user's seqs and produce times grow, so their
    max is the latest record's). Pathway emits one update per key per minibatch: two records
    of one user in one minibatch give one row, the later seq. The input's user walk puts a
    user's next record ``users`` messages later (2 s at 10k users and 5,000 msg/s), so a
    100 ms minibatch never holds two of a user unless Pathway runs seconds behind; the run
    would then show the earlier seq missing.

    SIGTERM: Pathway leaves it to Python's default (the process dies, no report); here it
    raises KeyboardInterrupt, which ``pw.run`` ends on (its engine checks Python's signals),
    and the report is written after it."""
    import signal

    started = time.time()
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter("[%(asctime)s]:%(levelname)s:%(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[stderr], force=True)

    import pathway as pw

    class View(pw.Schema):
        user_id: str
        seq: int
        ts_ms: float

    settings = {"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                "auto.offset.reset": "earliest", "session.timeout.ms": "6000"}
    views = pw.io.kafka.read(settings, topic=spec["topic"], format="json", schema=View,
                             mode="streaming", name="views",
                             autocommit_duration_ms=int(spec["autocommit_duration_ms"]))
    counts = views.groupby(pw.this.user_id).reduce(
        user=pw.this.user_id, count=pw.reducers.count(), seq=pw.reducers.max(pw.this.seq),
        ts_ms=pw.reducers.max(pw.this.ts_ms))
    pw.io.kafka.write(counts, {"bootstrap.servers": spec["bootstrap"]}, spec["output"],
                      format="json", key=counts.user, name="counts_out")
    persistence = pw.persistence.Config(
        pw.persistence.Backend.filesystem(spec["state_dir"]),
        snapshot_interval_ms=int(spec["snapshot_interval_ms"]))
    built = time.time()

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    stopped = None
    try:
        pw.run(monitoring_level=pw.MonitoringLevel.NONE, default_logging=False,
               persistence_config=persistence)
    except KeyboardInterrupt:
        stopped = "SIGTERM"
    return {"started": started, "graph_built": built, "ended": time.time(),
            "stopped": stopped, **_usage()}


def final_counts(rows: Iterable[dict[str, Any]]) -> tuple[dict[str, int], dict[str, Any]]:
    """Each key's final count from Pathway's update stream (``diff`` +1 inserts a row, -1
    retracts one; ``time`` orders them, though the sum does not depend on it), and the keys
    whose rows do not add up to exactly one count (``{key: {count: multiplicity}}``)."""
    held: dict[str, Counter[int]] = {}
    for row in sorted(rows, key=lambda r: r.get("time", 0)):
        held.setdefault(row["user_id"], Counter())[row["count"]] += int(row.get("diff", 1))
    counts: dict[str, int] = {}
    bad: dict[str, Any] = {}
    for key, multiset in held.items():
        live = {c: n for c, n in multiset.items() if n}
        if len(live) == 1 and next(iter(live.values())) == 1:
            counts[key] = next(iter(live))
        elif live:
            bad[key] = live
    return counts, bad


def dump(spec: dict[str, Any]) -> dict[str, Any]:
    path = Path(spec["output"])
    with path.open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    counts, bad = final_counts(rows)
    return {"counts": counts, "rows": len(rows), "inconsistent": len(bad),
            "inconsistent_examples": dict(list(bad.items())[:5]),
            "retractions": sum(1 for r in rows if r.get("diff", 1) < 0)}


if __name__ == "__main__":
    from peer_main import main  # this directory, first on sys.path when run as a script

    main({"count": count, "dump": dump, "latency": latency}, ("pathway",))

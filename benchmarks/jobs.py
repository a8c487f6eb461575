"""The millpond jobs of the stateful-count benchmark: the StreamTask count and its dataflow
(streams API) equivalents.

``BenchCounter.process`` is the per-user count of ``tests.jobs.counting.Counter``. The only
addition is timing: the first message swaps in the plain method after noting the wall
clock (no per-message cost once the task's process method is looked up again), and ``close`` writes the process's first-message
time and end-of-stream time to ``bench.timing.file``.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from millpond import OutgoingMessageEnvelope, StreamTask
from millpond.streams import App

_first: float | None = None
_end: float | None = None


class BenchCounter(StreamTask):
    """Counts messages per ``user_id`` into the ``counts`` store."""

    def init(self, context: Any) -> None:
        self.counts = context.get_store("counts")
        self.timing_file = context.config.get("bench.timing.file")
        self.process = self._first_process  # type: ignore[method-assign]

    def _first_process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        global _first
        if _first is None:
            _first = time.time()
        # Back to the class's method for every later lookup (a caller may still hold this
        # bound method for the rest of its batch, so don't assume it is called only once).
        self.__dict__.pop("process", None)
        type(self).process(self, envelope, collector, coordinator)

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        user = envelope.message["user_id"]
        self.counts.put(user, (self.counts.get(user) or 0) + 1)

    def on_end_of_stream(self, collector: Any, coordinator: Any) -> None:
        global _end
        _end = time.time()

    def close(self) -> None:
        if self.timing_file:
            with open(self.timing_file, "w") as f:
                json.dump({"first_message": _first, "end_of_stream": _end}, f)


class LatencyCounter(BenchCounter):
    """The latency workload's job (benchmarks/workloads/latency.py): BenchCounter's count,
    and for every input message ``{"user_id", "seq", "ts_ms"}`` one output record
    ``{"user", "count", "ts_ms", "seq"}`` keyed by the user to ``bench.output``, sent when the
    message is processed (the reader measures its latency from ``ts_ms``, the produce time)."""

    def init(self, context: Any) -> None:
        super().init(context)
        self.output = context.config.get("bench.output")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        msg = envelope.message
        user = msg["user_id"]
        count = (self.counts.get(user) or 0) + 1
        self.counts.put(user, count)
        collector.send(OutgoingMessageEnvelope(self.output, key=user, message={
            "user": user, "count": count, "ts_ms": msg["ts_ms"], "seq": msg["seq"]}))


class BenchKeeper(StreamTask):
    """Keeps the latest value of each input key in the ``kept`` store (the snapshot-restore
    benchmark's job: one store write, hence one changelog record, per distinct key)."""

    def init(self, context: Any) -> None:
        self.kept = context.get_store("kept")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.kept.put(envelope.key, envelope.message)


# ---- dataflows (app.class=benchmarks.jobs:<function>) ------------------------------------
# Each app reads ``bench.input`` (and writes ``bench.output``); its count's operator (and
# store) is named ``counts``, as BenchCounter's store is, so `millpond store dump --store
# counts` reads either job's counts.


def _first_mark(config: Any) -> Any:
    """A ``peek`` for the head of a source's chain that notes the first message's wall clock
    (written to ``bench.timing.file`` as BenchCounter's close writes it) and then takes itself
    out of the chain, so later records cost nothing.

    The fused chain of a topic is a dict entry the task's batch loop looks up per batch
    (``steps[topic]``, millpond/tasks/instance.py); on its first call the mark replaces that
    entry with the peek's downstream step. Benchmark-only, as BenchCounter's swap is; where
    the frames are not the expected ones it stays in the chain (one call per record) and the
    timing file says so (``"marker": "kept"``).
    """
    timing_file = config.get("bench.timing.file")
    tried: list[bool] = []  # this task's chain: one try at taking the mark out

    def mark(key: Any, value: Any) -> None:
        global _first
        if tried:
            return
        tried.append(True)
        swapped = _unhook()
        if _first is None:
            _first = time.time()
            if timing_file:
                with open(timing_file, "w") as f:
                    json.dump({"first_message": _first, "end_of_stream": None,
                               "marker": "swapped" if swapped else "kept"}, f)

    return mark


def _unhook() -> bool:
    """Called by ``mark`` <- the peek's step <- the batch loop: point the loop's
    ``steps[topic]`` at the peek's downstream step. False where that is not what called."""
    try:
        peek = sys._getframe(2)
        loop = peek.f_back
        emit = peek.f_locals.get("emit")
        steps = loop.f_locals.get("steps") if loop is not None else None
        topic = loop.f_locals.get("topic") if loop is not None else None
        if (emit is None or not isinstance(steps, dict) or topic not in steps
                or getattr(steps[topic], "__code__", None) is not peek.f_code):
            return False
        steps[topic] = emit
        return True
    except (ValueError, AttributeError):
        return False


def _topic(config: Any, key: str) -> str:
    return str(config.get(key)).removeprefix("kafka.")


def count_app(config: Any) -> App:
    """The count job as a dataflow: ``source(input).count("counts")`` (its counts are kept,
    not sent anywhere, as BenchCounter's are)."""
    app = App()
    app.source(_topic(config, "bench.input")).peek(_first_mark(config)).count("counts")
    return app


def _latency_step(count: int | None, msg: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The latency count's step: the user's count + 1 as the new state, and the output
    record LatencyCounter sends."""
    n = (count or 0) + 1
    return n, {"user": msg["user_id"], "count": n, "ts_ms": msg["ts_ms"], "seq": msg["seq"]}


def latency_app(config: Any) -> App:
    """The latency workload's count as a dataflow (benchmarks/workloads/latency.py, system
    ``millpond-dataflow``): ``source(input).stateful_map("counts", step).to(output)``, one
    output per input as LatencyCounter sends. ``stateful_map`` and not ``count``: ``count``
    emits the count alone, and the output also carries the input's ``seq`` and ``ts_ms``
    (what the reader measures from); its state is the count, as ``count``'s is."""
    app = App()
    (app.source(_topic(config, "bench.input")).stateful_map("counts", _latency_step)
     .to(_topic(config, "bench.output")))
    return app


def keep(view: dict[str, Any]) -> bool:
    """The hop benchmark's filter: every page view but those of /help (6 in 7 kept)."""
    return bool(view["page"] != "/help")


def user_of(view: dict[str, Any]) -> str:
    """The hop benchmark's new key: the view's ``user_id`` field."""
    return str(view["user_id"])


def one_stage_app(config: Any) -> App:
    """``filter -> count -> to``: the two-stage app without its hop (the baseline of the
    repartition cost)."""
    app = App()
    (app.source(_topic(config, "bench.input")).peek(_first_mark(config)).filter(keep)
     .count("counts").to(_topic(config, "bench.output")))
    return app


def two_stage_app(config: Any) -> App:
    """``filter -> key_by(user_id) -> count -> to``: every kept record goes through the
    internal topic (partitioned by the new key's hash, not the input's user number modulo
    the partitions, so ~3/4 change partition) before it is counted."""
    app = App()
    (app.source(_topic(config, "bench.input")).peek(_first_mark(config)).filter(keep)
     .key_by("by-user", user_of).count("counts").to(_topic(config, "bench.output")))
    return app


WINDOW_MS = 60_000  # the windows workload's tumbling window (1 minute)


def event_time(view: dict[str, Any]) -> int:
    """The windows workload's event time: the page view's ``ts`` field (ms)."""
    return int(view["ts"])


def window_app(config: Any) -> App:
    """The windows workload: a 1-minute tumbling count per key by the value's ``ts``, final
    results only (``{"start", "end", "value"}``, once per key and window when the operator's
    stream time passes the window's end; grace 0), sent to ``bench.output``."""
    app = App()
    (app.source(_topic(config, "bench.input")).peek(_first_mark(config))
     .tumbling_window(WINDOW_MS, timestamp=event_time).count("windows").final()
     .to(_topic(config, "bench.output")))
    return app


# ---- the joins workload (benchmarks/workloads/joins.py) ----------------------------------
JOIN_RETENTION_MS = 7 * 24 * 3_600_000  # the versioned table's history (Quix's default grace)


def enrich(view: dict[str, Any], profile: dict[str, Any]) -> dict[str, Any]:
    """A page view joined with its user's profile: what every system of the joins workload
    sends per stream record (``seq`` names the record, so the output is checked exactly)."""
    return {"seq": view["seq"], "user_id": view["user_id"], "page": view["page"],
            "zip": profile["zip"], "tier": profile["tier"]}


def join_app(config: Any) -> App:
    """The joins workload, millpond's stream-table join: ``bench.table`` kept per key in
    store ``profiles`` (``app.table``), each record of ``bench.input`` joined with its
    user's row (inner) and sent to ``bench.output``."""
    app = App()
    profiles = app.table(_topic(config, "bench.table"), "profiles")
    (app.source(_topic(config, "bench.input")).peek(_first_mark(config))
     .join(profiles, enrich).to(_topic(config, "bench.output")))
    return app


def asof_app(config: Any) -> App:
    """The joins workload as an as-of join (Quix's ``join_asof`` shape): ``bench.table``'s
    versions by the value's ``ts`` in store ``profiles`` (``app.versioned_table``), each
    record joined with its user's latest version at or before its own ``ts``."""
    app = App()
    profiles = app.versioned_table(_topic(config, "bench.table"), "profiles",
                                   JOIN_RETENTION_MS, timestamp=event_time)
    (app.source(_topic(config, "bench.input")).peek(_first_mark(config))
     .join_asof(profiles, enrich, timestamp=event_time).to(_topic(config, "bench.output")))
    return app


SESSION_GAP_MS = 30 * 60_000  # the sessions workload's inactivity gap (30 minutes)


def session_app(config: Any) -> App:
    """The sessions workload (benchmarks/workloads/sessions.py): a session-window count per
    key by the value's ``ts`` with a SESSION_GAP_MS gap, final results only (``{"start",
    "end", "value"}``: the session's first and last record's time and its record count, once
    per key and session when the operator's stream time reaches ``end + gap``; grace 0), sent
    to ``bench.output``. window_app's shape with ``session_window`` for ``tumbling_window``."""
    app = App()
    (app.source(_topic(config, "bench.input")).peek(_first_mark(config))
     .session_window(SESSION_GAP_MS, timestamp=event_time).count("sessions").final()
     .to(_topic(config, "bench.output")))
    return app


class CappedDocuments(StreamTask):
    """benchmarks/memory_cap.py's read-then-write task (tests.jobs.documents' pattern):
    ``docs[id] = {"n": previous n + 1, "body": message body}``; with
    ``bench.second.store`` set, the same document also goes into that store (read, then
    written: two stores of the same size per task)."""

    def init(self, context: Any) -> None:
        self.docs = context.get_store("docs")
        second = context.config.get("bench.second.store")
        self.more = context.get_store(second) if second else None

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        msg = envelope.message
        key = msg["id"]
        doc = self.docs.get(key)
        new = {"n": (doc["n"] if doc else 0) + 1, "body": msg["body"]}
        self.docs.put(key, new)
        if self.more is not None:
            other = self.more.get(key)
            self.more.put(key, {"n": (other["n"] if other else 0) + 1, "body": msg["body"]})

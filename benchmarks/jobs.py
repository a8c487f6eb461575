"""The millpond job of the stateful-count benchmark.

``BenchCounter.process`` is the per-user count of ``tests.jobs.counting.Counter``. The only
addition is timing: the first message swaps in the plain method after noting the wall
clock (no per-message cost once the task's process method is looked up again), and ``close`` writes the process's first-message
time and end-of-stream time to ``bench.timing.file``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from millpond import StreamTask

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
        BenchCounter.process(self, envelope, collector, coordinator)

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


class BenchKeeper(StreamTask):
    """Keeps the latest value of each input key in the ``kept`` store (the snapshot-restore
    benchmark's job: one store write, hence one changelog record, per distinct key)."""

    def init(self, context: Any) -> None:
        self.kept = context.get_store("kept")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.kept.put(envelope.key, envelope.message)

"""Counters that use the coordinator, or are slow to close, for the runtime's promise tests.

Config keys (read with ``context.config.get``):

* ``commit.at.offsets``: comma-separated input offsets after which the task calls
  ``coordinator.commit()``;
* ``commit.every.messages``: call ``coordinator.commit()`` after every N-th message;
* ``shutdown.at.offset``: the input offset after which the task calls
  ``coordinator.shutdown()``;
* ``commit.in.window``: ``true`` to call ``coordinator.commit()`` from ``window()`` when
  messages were processed since the last window;
* ``process.delay.s``: seconds to sleep per message (a slow task);
* ``close.delay.s``: seconds ``close()`` sleeps, after logging ``closing slowly`` (a slow
  shutdown);
* ``coordinate.partitions``: comma-separated partitions whose tasks do all of the above
  (default: every task); the others only count.
"""

from __future__ import annotations

import logging
import time

from tests.jobs.counting import Counter

log = logging.getLogger("tests.jobs.coordinating")


class CoordinatingCounter(Counter):
    """A per-user counter that asks for commits and a shutdown where its config says."""

    def init(self, context):  # type: ignore[no-untyped-def]
        super().init(context)
        self.name = context.task_name
        only = context.config.get("coordinate.partitions")
        mine = not only or str(context.partition) in only.split(",")

        def get(key: str) -> str:
            return (context.config.get(key) if mine else None) or ""

        self.commit_at = {int(o) for o in get("commit.at.offsets").split(",") if o}
        self.commit_every = int(get("commit.every.messages") or 0)
        self.shutdown_at = int(get("shutdown.at.offset") or -1)
        self.delay = float(get("process.delay.s") or 0)
        self.close_delay = float(get("close.delay.s") or 0)
        self.commit_in_window = get("commit.in.window") == "true"
        self.seen = self.seen_at_window = 0

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        super().process(envelope, collector, coordinator)
        self.seen += 1
        if envelope.offset in self.commit_at or (
                self.commit_every and self.seen % self.commit_every == 0):
            coordinator.commit()
        if envelope.offset == self.shutdown_at:
            log.info("task %s asks for a shutdown after offset %d", self.name, envelope.offset)
            coordinator.shutdown()
        if self.delay:
            time.sleep(self.delay)

    def window(self, collector, coordinator):  # type: ignore[no-untyped-def]
        if self.commit_in_window and self.seen > self.seen_at_window:
            self.seen_at_window = self.seen
            coordinator.commit()

    def close(self) -> None:
        if self.close_delay:
            log.info("task %s closing slowly (%.0f s)", self.name, self.close_delay)
            time.sleep(self.close_delay)

"""A counter keyed ``hour|user`` (input keyed by user): a store not keyed by the input key."""

from __future__ import annotations

from millpond import StreamTask


class HourlyCounter(StreamTask):
    """Counts messages per (hour, user), the hour being ``i % 3`` of the message; with
    ``hourly.totals`` set, also counts every task's messages under the one key ``all|total``
    (a per-task aggregate: the same key in every partition)."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.counts = context.get_store("counts")
        self.totals = context.config.get("hourly.totals")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        key = f"{envelope.message['i'] % 3}|{envelope.message['user_id']}"
        self.counts.put(key, (self.counts.get(key) or 0) + 1)
        if self.totals:
            self.counts.put("all|total", (self.counts.get("all|total") or 0) + 1)


def user_of(key: str) -> str:
    """The --key-fn of this store: ``hour|user`` belongs to input key ``user``."""
    return key.split("|", 1)[1]

"""Example 1, windowed aggregation: page views per user per hour, by event time.

Counts live in the ``hourly-counts`` store under ``<hour>|<user_id>`` keys, where ``<hour>`` is
the window's start as ``YYYY-MM-DDTHH`` (UTC, fixed width, so keys sort by time and then user).
The task's event time (watermark) is the largest ``timestamp`` field it has seen, kept in the
``event-time`` store so it survives restarts. An hour closes when the watermark passes its end
plus ``window.grace.ms`` (room for slightly out-of-order views). At that moment, in process(),
one range scan from the first key up to the first open hour's prefix finds exactly the closed
hours' counts, which are sent to ``output.stream`` (key ``<hour>|<user_id>``, message
``{"hour", "user_id", "views"}``) and deleted. Views for an already closed hour are too late and
are dropped (counted in the log). An hour stays open while its partition's event time stands
still: closing follows event time, not the wall clock.

Everything depends only on the order of the task's own input partition, so a replay after a
crash re-sends the same values: the output is at-least-once with stable keys (dedupe by key).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from millpond import OutgoingMessageEnvelope, StreamTask

log = logging.getLogger(__name__)

WATERMARK = "watermark"


def hour_key(window: int, window_ms: int) -> str:
    """The sortable prefix of a window: its start as ``YYYY-MM-DDTHH`` (``...THH:MM`` if < 1h)."""
    start = datetime.fromtimestamp(window * window_ms / 1000, UTC)
    return start.strftime("%Y-%m-%dT%H" if window_ms % 3_600_000 == 0 else "%Y-%m-%dT%H:%M")


class HourlyPageViews(StreamTask):
    def init(self, context):
        config = context.config
        self.counts = context.get_store("hourly-counts")
        self.event_time = context.get_store("event-time")
        self.output = config.get("output.stream", "kafka.hourly-page-views")
        self.window_ms = int(config.get("window.size.ms", "3600000"))
        self.grace_ms = int(config.get("window.grace.ms", "300000"))
        self.watermark = self.event_time.get(WATERMARK)  # None until the first view
        self.dropped = 0

    def first_open_window(self) -> int | None:
        """Windows before this one are closed (end + grace <= watermark)."""
        if self.watermark is None:
            return None
        return (self.watermark - self.grace_ms) // self.window_ms

    def process(self, envelope, collector, coordinator):
        view = envelope.message
        ts = int(view["timestamp"])
        window = ts // self.window_ms
        open_from = self.first_open_window()
        if open_from is not None and window < open_from:
            self.dropped += 1
            log.debug("dropping a late view of %s at %d: window %s is closed",
                      view["user_id"], ts, hour_key(window, self.window_ms))
            return
        key = f"{hour_key(window, self.window_ms)}|{view['user_id']}"
        self.counts.put(key, (self.counts.get(key) or 0) + 1)
        if self.watermark is None or ts > self.watermark:
            self.watermark = ts
            self.event_time.put(WATERMARK, ts)
            if self.first_open_window() != open_from:
                self.close_windows(collector)

    def close(self):
        if self.dropped:
            log.info("dropped %d late views (their hour had closed)", self.dropped)

    def close_windows(self, collector) -> None:
        """Emit and delete the counts of every closed window: one range scan over the keys."""
        open_from = self.first_open_window()
        if open_from is None:
            return
        bound = hour_key(open_from, self.window_ms)  # keys "<hour>|..." of closed hours sort below
        with self.counts.range("", bound) as closed:
            rows = list(closed)
        for key, views in rows:
            hour, _, user = key.partition("|")
            collector.send(OutgoingMessageEnvelope(
                self.output, key=key, message={"hour": hour, "user_id": user, "views": views}))
        self.counts.delete_all(key for key, _ in rows)

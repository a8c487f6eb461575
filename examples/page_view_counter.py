"""The README's example: count page views per user, emit the counts every window."""

from __future__ import annotations

from millpond import OutgoingMessageEnvelope, StreamTask


class PageViewCounter(StreamTask):
    def init(self, context):
        self.counts = context.get_store("page-view-counts")
        self.output = context.config.get("counts.stream", "kafka.user-counts")
        self.changed = set()

    def process(self, envelope, collector, coordinator):
        user = envelope.message["user_id"]
        self.counts.put(user, (self.counts.get(user) or 0) + 1)
        self.changed.add(user)

    def window(self, collector, coordinator):
        for user in sorted(self.changed):
            collector.send(OutgoingMessageEnvelope(
                self.output, key=user, message=self.counts.get(user)))
        self.changed.clear()

    def on_end_of_stream(self, collector, coordinator):
        self.window(collector, coordinator)  # a bounded run (--bounded) sends its last counts

"""Python ports of the StreamTasks behind real Samza configs (hello-samza, Samza's docs), and a
task that writes values of a requested size (large-message tests)."""

from __future__ import annotations

from millpond import OutgoingMessageEnvelope, StreamTask


class WikipediaStatsTask(StreamTask):
    """hello-samza's WikipediaStatsStreamTask: edits per window, all-time edits in a store."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.store = context.get_store("wikipedia-stats")
        self.output = context.config.get("stats.stream", "kafka.wikipedia-stats")
        self.edits = 0
        self.byte_diff = 0
        self.titles: set[str] = set()

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        edit = envelope.message
        self.store.put("count-edits-all-time", (self.store.get("count-edits-all-time") or 0) + 1)
        self.edits += 1
        self.titles.add(edit["title"])
        self.byte_diff += int(edit.get("diff-bytes", 0))

    def window(self, collector, coordinator):  # type: ignore[no-untyped-def]
        counts = {"edits": self.edits, "bytes-added": self.byte_diff,
                  "unique-titles": len(self.titles),
                  "edits-all-time": self.store.get("count-edits-all-time")}
        collector.send(OutgoingMessageEnvelope(self.output, message=counts))
        self.edits, self.byte_diff, self.titles = 0, 0, set()


class WikipediaParserTask(StreamTask):
    """hello-samza's WikipediaParserStreamTask, reduced to passing raw edits on."""

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        collector.send(OutgoingMessageEnvelope("kafka.wikipedia-edits", message=envelope.message))


class LastPageViewTask(StreamTask):
    """The job of Samza's serialization docs: the latest page view per (integer) user id."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.store = context.get_store("LastPageViewPerUser")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        self.store.put(envelope.key, envelope.message)


class SizedValueTask(StreamTask):
    """Puts ``"x" * size`` under ``user`` for each ``{"user": ..., "size": ...}`` message
    into store ``values`` (string serdes): values of chosen sizes for the large-message tests."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.values = context.get_store("values")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        msg = envelope.message
        self.values.put(msg["user"], "x" * int(msg["size"]))

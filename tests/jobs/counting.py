"""A per-user counter: the canonical stateful job of the tests."""

from __future__ import annotations

import os

from millpond import OutgoingMessageEnvelope, StreamTask


class Counter(StreamTask):
    """Counts messages per ``user_id``; with ``emit.stream`` set, emits every new count."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.counts = context.get_store("counts")
        self.emit = context.config.get("emit.stream")
        self.fail_on = context.config.get("fail.on.user")
        self.big_on = context.config.get("big.value.on.user")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        user = envelope.message["user_id"]
        if user == self.fail_on:
            raise ValueError(f"refusing user {user}")
        if user == self.big_on:
            self.counts.put(f"{user}-blob", "x" * 2_000_000)  # over message.max.bytes
        count = (self.counts.get(user) or 0) + 1
        self.counts.put(user, count)
        if self.emit:
            collector.send(OutgoingMessageEnvelope(self.emit, key=user, message=count))


class SlowCounter(Counter):
    """A counter that is slow enough for a second process to join mid-run."""

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        super().process(envelope, collector, coordinator)
        delay = float(os.environ.get("MILLPOND_TEST_DELAY", "0"))
        if delay:
            import time

            time.sleep(delay)


class RecordingRestoreListener:
    """Appends every restore callback to the file named by MILLPOND_TEST_EVENTS."""

    def _log(self, event: str, stats) -> None:  # type: ignore[no-untyped-def]
        with open(os.environ["MILLPOND_TEST_EVENTS"], "a") as fh:
            fh.write(f"{event} {stats.store} {stats.partition} {stats.records}\n")

    def on_restore_start(self, stats) -> None:  # type: ignore[no-untyped-def]
        self._log("start", stats)

    def on_batch_restored(self, stats) -> None:  # type: ignore[no-untyped-def]
        self._log("batch", stats)

    def on_restore_end(self, stats) -> None:  # type: ignore[no-untyped-def]
        self._log("end", stats)

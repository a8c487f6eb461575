"""A job with two changelogged stores per task: the zombie/chaos tests' workload.

``counts``: user -> number of messages; ``sums``: user -> sum of the messages' ``amount``.
With ``emit.stream`` set, every input also produces one output record keyed by the input's
unique position ``"<partition>:<offset>"`` (value: the producer's sequence number), so an
exactly-once test can check the output for duplicates and gaps record by record.
"""

from __future__ import annotations

import json
import os
import time

from millpond import OutgoingMessageEnvelope, StreamTask


class TwoStores(StreamTask):
    def init(self, context):  # type: ignore[no-untyped-def]
        self.counts = context.get_store("counts")
        self.sums = context.get_store("sums")
        self.emit = context.config.get("emit.stream")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        msg = envelope.message
        user = msg["user_id"]
        self.counts.put(user, (self.counts.get(user) or 0) + 1)
        self.sums.put(user, (self.sums.get(user) or 0) + msg["amount"])
        if self.emit:
            collector.send(OutgoingMessageEnvelope(
                self.emit, key=f"{envelope.partition}:{envelope.offset}", message=msg["seq"],
                partition=envelope.partition))


class TimedRestoreListener:
    """Appends ``<unix time> <pid> <event> <store> <partition> <records>`` per restore
    callback to the file named by ``MILLPOND_TEST_EVENTS`` (one line, one write); waits
    ``MILLPOND_TEST_RESTORE_START_DELAY`` seconds at each restore's start."""

    def _log(self, event: str, stats) -> None:  # type: ignore[no-untyped-def]
        line = (f"{time.time():.3f} {os.getpid()} {event} {stats.store} {stats.partition} "
                f"{stats.records}\n")
        with open(os.environ["MILLPOND_TEST_EVENTS"], "a") as fh:
            fh.write(line)

    def on_restore_start(self, stats) -> None:  # type: ignore[no-untyped-def]
        self._log("start", stats)
        # A restore that takes at least this long per store partition (seconds), so a test can
        # make a process join while it restores however fast the machine restores
        time.sleep(float(os.environ.get("MILLPOND_TEST_RESTORE_START_DELAY", "0")))

    def on_batch_restored(self, stats) -> None:  # type: ignore[no-untyped-def]
        pass

    def on_restore_end(self, stats) -> None:  # type: ignore[no-untyped-def]
        self._log("end", stats)


def encode(user: str, amount: int, seq: int) -> bytes:
    """The input message format of this job."""
    return json.dumps({"user_id": user, "amount": amount, "seq": seq}).encode()

"""A per-user counter: the canonical stateful job of the tests."""

from __future__ import annotations

import os
import signal
import sys
import time

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


class CommittingCounter(Counter):
    """A counter that commits right after each message of the user ``commit.on.user`` (its
    other commits: ``task.commit.ms``): a commit at a known input offset."""

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        super().process(envelope, collector, coordinator)
        if envelope.message["user_id"] == self.commit_on:
            coordinator.commit()

    def init(self, context):  # type: ignore[no-untyped-def]
        super().init(context)
        self.commit_on = context.config.get("commit.on.user")


class SlowCounter(Counter):
    """A counter that is slow enough for a second process to join mid-run."""

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        super().process(envelope, collector, coordinator)
        delay = float(os.environ.get("MILLPOND_TEST_DELAY", "0"))
        if delay:
            time.sleep(delay)


class EvictingCounter(SlowCounter):
    """A slow counter that says once (``dirty cache entry evicted``, on stderr) when its
    store's object cache first evicted an entry that was dirty: the proof that a test's
    small cache wrote entries down by eviction, between commits."""

    def init(self, context):  # type: ignore[no-untyped-def]
        super().init(context)
        self.cache = getattr(self.counts, "inner", self.counts)  # null-safe -> cached
        self.said = False

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        full = len(self.cache._dirty) >= self.cache.cache_size  # every entry dirty
        before = self.cache.evictions
        super().process(envelope, collector, coordinator)
        if full and self.cache.evictions > before and not self.said:
            self.said = True
            print(f"dirty cache entry evicted (task {envelope.partition})", file=sys.stderr,
                  flush=True)


_paused = False  # once per process, whichever task instance reaches the offset


class PausingCounter(SlowCounter):
    """A slow counter whose process freezes itself (SIGSTOP) once, right after it processed
    and emitted input offset ``MILLPOND_TEST_PAUSE_AT``: a pause at a known point in the
    middle of a transaction, as a long GC pause or a suspended VM would make one."""

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        global _paused
        super().process(envelope, collector, coordinator)
        at = os.environ.get("MILLPOND_TEST_PAUSE_AT")
        if at is not None and not _paused and envelope.offset == int(at):
            _paused = True
            time.sleep(1.0)  # the producer sends what the open transaction holds meanwhile
            print(f"pausing at offset {envelope.offset}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)


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


class SlowRestoreListener:
    """Waits MILLPOND_TEST_RESTORE_DELAY seconds after each restored batch: a restore that
    lasts, batch by batch, for the queries that must see it restoring."""

    def on_restore_start(self, stats) -> None:  # type: ignore[no-untyped-def]
        pass

    def on_batch_restored(self, stats) -> None:  # type: ignore[no-untyped-def]
        time.sleep(float(os.environ.get("MILLPOND_TEST_RESTORE_DELAY", "0")))

    def on_restore_end(self, stats) -> None:  # type: ignore[no-untyped-def]
        pass

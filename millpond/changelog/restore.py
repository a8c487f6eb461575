"""Restore: replay a changelog partition into a storage engine.

Reads in large batches and writes each batch with one WriteBatch and the WAL off; the
engine is flushed at the end so a crash after restore cannot lose what was replayed.

A restore runs in steps (:func:`restore_steps` yields after each batch) so a caller can
keep polling its group consumer while a large store restores; :func:`restore_partition`
runs it to the end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator, Mapping
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from millpond import clients
from millpond.changelog.errors import ChangelogError

log = logging.getLogger(__name__)

T = TypeVar("T")

BATCH = 20_000
PROGRESS_EVERY_S = 3.0
# librdkafka waits fetch.queue.backoff.ms to fetch again once a partition's prefetch queue is
# full; its 1 s default idles any consumer that drains the queue in well under a second. Every
# millpond consumer (restore and the job's input consumer) uses this instead.
FETCH_QUEUE_BACKOFF_MS = 20


@dataclass
class RestoreStats:
    """What one store partition's restore did."""

    store: str
    topic: str
    partition: int
    start_offset: int  # first offset asked for
    end_offset: int  # exclusive
    records: int = 0
    bytes: int = 0
    seconds: float = 0.0
    full: bool = False
    downloaded: int = 0  # bytes of the remote snapshot the store started from
    snapshot: str | None = None  # its id, if it started from one
    download_seconds: float = 0.0  # time fetching it (``seconds`` is the changelog replay's)
    position: int = -1  # next offset to read (end_offset once done); -1 before it starts

    @property
    def remaining(self) -> int:
        """Offsets left to read (compaction gaps included), for progress reports."""
        start = self.start_offset if self.position < 0 else self.position
        return max(0, self.end_offset - start)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


class RestoreListener(Protocol):
    """User callbacks around a store's restore (all optional to act on)."""

    def on_restore_start(self, stats: RestoreStats) -> None: ...
    def on_batch_restored(self, stats: RestoreStats) -> None: ...
    def on_restore_end(self, stats: RestoreStats) -> None: ...


class NullListener:
    """A listener that does nothing."""

    def on_restore_start(self, stats: RestoreStats) -> None:
        pass

    def on_batch_restored(self, stats: RestoreStats) -> None:
        pass

    def on_restore_end(self, stats: RestoreStats) -> None:
        pass


def restore_consumer(base: Mapping[str, Any], isolation: str) -> Consumer:
    """A consumer tuned for bulk reads of one partition (no group, no commits)."""
    conf: dict[str, Any] = {
        "group.id": "millpond-restore",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        # Bounded prefetch: memory must not grow with the changelog's size.
        "fetch.max.bytes": 16 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "queued.max.messages.kbytes": 16 * 1024,
        "fetch.wait.max.ms": 50,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }
    conf.update(base)
    conf["isolation.level"] = isolation
    return clients.consumer(conf)


# Errors a partition's leader gives while it moves or right after its topic was created.
_TRANSIENT = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._TIMED_OUT,
    KafkaError.NOT_COORDINATOR, KafkaError._TRANSPORT,
})


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float = 30.0) -> tuple[int, int]:
    """(low, high) offsets of ``topic[partition]`` (high is the LSO for read_committed
    consumers), retrying transient leader errors for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(1.0, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in _TRANSIENT):
                raise
            if time.monotonic() >= deadline:
                raise ChangelogError(
                    f"offsets of {topic}[{partition}] unavailable for {timeout:.0f}s: "
                    f"{error.str()}") from exc
            time.sleep(0.2)


def read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, timeout: float = 60.0
) -> Generator[list[Message], None, None]:
    """Yield batches of records of ``topic[partition]`` with ``start <= offset < end``.

    Compaction gaps and transaction markers are skipped; ``end`` must not be past the
    partition's readable end, or this raises after ``timeout`` seconds without progress.
    """
    if start >= end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    last_progress = time.monotonic()
    position = start
    try:
        while True:
            # consume() waits for a full batch or the timeout: ask for no more than remain.
            msgs = consumer.consume(max(1, min(BATCH, end - position)), 0.2)
            if msgs and msgs[-1].error() is None and msgs[-1].offset() < end - 1:  # type: ignore[operator]
                # The partition's end (EOF) and offsets >= end can only be at the tail, so a
                # batch whose last record is a plain one before the end needs no scan.
                last_progress = time.monotonic()
                position = msgs[-1].offset() + 1  # type: ignore[operator]
                yield msgs
                continue
            batch: list[Message] = []
            done = False
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if (msg.offset() or 0) >= end:
                            done = True
                        continue
                    raise ChangelogError(f"reading {topic}[{partition}]: {err.str()}")
                if msg.offset() >= end:  # type: ignore[operator]
                    done = True
                    break
                batch.append(msg)
            if batch:
                last_progress = time.monotonic()
                position = batch[-1].offset() + 1  # type: ignore[operator]
                if position >= end:
                    done = True
                yield batch
            if done:
                return
            position = consumer.position([TopicPartition(topic, partition)])[0].offset
            if position >= end:
                return
            if time.monotonic() - last_progress > timeout:
                raise ChangelogError(
                    f"reading {topic}[{partition}] stalled at offset {position} before {end}"
                )
    finally:
        consumer.unassign()


def restore_steps(
    engine: Any, consumer: Consumer, stats: RestoreStats, listener: RestoreListener | None = None,
) -> Generator[RestoreStats, None, RestoreStats]:
    """Replay ``stats.topic[stats.partition]`` from ``start_offset`` to ``end_offset`` into
    ``engine``, yielding ``stats`` after each written batch (at most :data:`BATCH` records).

    Returns ``stats`` (as ``StopIteration.value``) once the engine is flushed. Closing the
    generator early unassigns ``consumer`` and leaves the engine open but not flushed: what
    was written is not durable and no ``OFFSET`` describes it.
    """
    listener = listener or NullListener()
    stats.position = stats.start_offset
    listener.on_restore_start(stats)
    began = last_log = time.monotonic()
    total = max(0, stats.end_offset - stats.start_offset)
    write_batch = engine.write_batch
    # closing(): an early close of this generator unassigns the consumer at once, not at GC.
    with closing(read_range(consumer, stats.topic, stats.partition, stats.start_offset,
                            stats.end_offset)) as batches:
        for batch in batches:
            keys = list(map(Message.key, batch))
            values = list(map(Message.value, batch))
            write_batch(list(zip(keys, values, strict=True)), disable_wal=True)
            stats.records += len(keys)
            stats.position = batch[-1].offset() + 1  # type: ignore[operator]
            stats.bytes += sum(map(len, keys)) + sum(map(len, filter(None, values)))  # type: ignore[arg-type]
            listener.on_batch_restored(stats)
            now = time.monotonic()
            if now - last_log >= PROGRESS_EVERY_S:
                last_log = now
                stats.seconds = now - began
                log.info("restoring %s %s[%d]: %d / ~%d records (%.0f rec/s)", stats.store,
                         stats.topic, stats.partition, stats.records, total, stats.records_per_s)
            yield stats
    engine.flush()
    stats.seconds = time.monotonic() - began
    stats.position = max(stats.position, stats.end_offset)
    listener.on_restore_end(stats)
    return stats


def run_steps(steps: Generator[Any, None, T]) -> T:
    """Drive a step generator to its end and return its value."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def restore_partition(
    engine: Any, consumer: Consumer, stats: RestoreStats, listener: RestoreListener | None = None,
) -> RestoreStats:
    """Replay ``stats.topic[stats.partition]`` from ``start_offset`` to ``end_offset`` into
    ``engine`` in one go (:func:`restore_steps` without the pauses)."""
    return run_steps(restore_steps(engine, consumer, stats, listener))

"""Reading Kafka partitions in bulk: a tuned consumer, watermarks, offset ranges.

Shared by everything that reads a topic by offset rather than through the group: changelog
restore, checkpoints, side inputs, status and the Spark tools.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from millpond.kafka import clients
from millpond.kafka.denials import denied, is_denied
from millpond.kafka.errors import BrokerUnreachableError, ReadError
from millpond.kafka.outage import is_unavailable

BATCH = 20_000  # records in one read_range batch at most ...
BATCH_BYTES = 16 * 1024 * 1024  # ... and about this many bytes of keys and values
_batch_bytes = BATCH_BYTES  # this process's bound (its memory plan's restore batch)
_FIRST_BATCH = 256  # records asked for before the first batch shows their size
# librdkafka waits fetch.queue.backoff.ms to fetch again once a partition's prefetch queue is
# full; its 1 s default idles any consumer that drains the queue in well under a second. Every
# millpond consumer (restore and the job's input consumer) uses this instead.
FETCH_QUEUE_BACKOFF_MS = 20
# What one read of read_range (and a side input's bootstrap) waits for records at most.
# consume() returns early only once it has every record asked for, and a range holds fewer
# records than offsets wherever transaction markers take offsets: a read waited out its
# whole wait at the tail of each partition of a transactional topic (0.2 s; the checkpoint
# topic's: 0.8 s of every 4-task restart), and a restore stepped in the run loop (a moved
# or restarted task opening) held the tasks that stay for as long.
READ_WAIT_S = 0.01


def batch_bytes() -> int:
    """This process's bound on one batch's keys and values (:func:`set_batch_bytes`)."""
    return _batch_bytes


def set_batch_bytes(max_bytes: int) -> None:
    """Bound every later read_range batch of this process to about ``max_bytes`` (the
    memory plan's restore batch, set once by a job's process or command)."""
    global _batch_bytes
    _batch_bytes = max(1024, max_bytes)


def restore_consumer(base: Mapping[str, Any], isolation: str) -> Consumer:
    """A consumer tuned for bulk reads of one partition (no group, no commits)."""
    conf: dict[str, Any] = {
        "group.id": "millpond-restore",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        # Bounded prefetch: memory must not grow with the changelog's size. A job's memory
        # plan sets these from its budget (millpond.config.memory); these are its values
        # at the default budget (16 MiB / 8 MiB responses cost ~100 MiB more RSS).
        "fetch.max.bytes": 4 * 1024 * 1024,
        "max.partition.fetch.bytes": 2 * 1024 * 1024,
        "queued.max.messages.kbytes": 16 * 1024,
        # ... and in count: librdkafka's 100,000 small records cost ~45 MiB more than their
        # payload (one a KiB, the memory plan's rule: millpond.config.memory).
        "queued.min.messages": 16 * 1024,
        # At a partition's end the broker holds a fetch this long; a read of the next
        # partition (the next task's restore, checkpoint partition) waits behind it on the
        # same connection: 50 ms cost each ~30-40 ms (restore speed the same at 10).
        "fetch.wait.max.ms": 10,
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
    consumers), retrying transient leader errors for up to ``timeout`` seconds (every 20 ms
    at first, doubling to 0.2 s: a topic this process just created has its leader within
    tens of milliseconds, and a fresh job's first restores wait on it)."""
    deadline = time.monotonic() + timeout
    backoff = 0.02
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(1.0, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            if is_denied(error):
                raise denied(error, topic, "Describe") from exc
            if not (error.retriable() or error.code() in _TRANSIENT or is_unavailable(error)):
                raise
            if time.monotonic() >= deadline:
                kind = BrokerUnreachableError if is_unavailable(error) else ReadError
                raise kind(
                    f"offsets of {topic}[{partition}] unavailable for {timeout:.0f}s: "
                    f"{error.str()}") from exc
            time.sleep(backoff)
            backoff = min(2 * backoff, 0.2)


def read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, timeout: float = 60.0,
    max_bytes: int | None = None, wait_s: float = READ_WAIT_S, idle: bool = False,
) -> Generator[list[Message], None, None]:
    """Yield batches of records of ``topic[partition]`` with ``start <= offset < end``.

    A batch holds at most :data:`BATCH` records and about ``max_bytes`` of keys and values
    (default: the process's bound, :func:`set_batch_bytes`):
    the number of records asked for follows the average record size of the batches so far.
    Compaction gaps and transaction markers are skipped; ``end`` must not be past the
    partition's readable end, or this raises after ``timeout`` seconds without progress.
    Each read waits at most ``wait_s`` for records; with ``idle``, one that brought none
    yields an empty batch, so a caller stepping this between other work (a task opening in
    the run loop) is never held longer than that (the first fetch after the assign alone
    takes ~50 ms).
    """
    if start >= end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    last_progress = time.monotonic()
    position = start
    unreachable: KafkaError | None = None  # the last "Kafka unreachable" error seen
    if max_bytes is None:
        max_bytes = _batch_bytes
    per_batch = min(BATCH, max(1, max_bytes // 1024), _FIRST_BATCH)  # records to ask for
    try:
        while True:
            # consume() waits for a full batch or the timeout: ask for no more than remain.
            msgs = consumer.consume(max(1, min(per_batch, end - position)), wait_s)
            if msgs:
                sample = msgs[::16]  # every 16th record's size: cheap, and close enough
                size = sum(len(m.value() or b"") + len(m.key() or b"") for m in sample)
                average = max(1, size // len(sample))
                per_batch = max(1, min(BATCH, max_bytes // average))
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
                    if is_denied(err):
                        raise denied(err, topic, "Read")
                    if is_unavailable(err):  # librdkafka reconnects; the stall bound applies
                        unreachable = err
                        continue
                    raise ReadError(f"reading {topic}[{partition}]: {err.str()}")
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
                if unreachable is not None:
                    raise BrokerUnreachableError(
                        f"reading {topic}[{partition}] stalled at offset {position} before "
                        f"{end}: Kafka unreachable ({unreachable.str()})")
                raise ReadError(
                    f"reading {topic}[{partition}] stalled at offset {position} before {end}"
                )
            if idle and not batch:
                yield batch
    finally:
        consumer.unassign()


def input_lag(consumer: Consumer, inputs: list[str], partition: int,
              next_offsets: dict[str, int]) -> dict[str, int]:
    """Messages between each input's next offset and its partition end, from the consumer's
    cached watermarks (updated by every fetch: no broker round trip); inputs whose end is
    not known yet are left out."""
    out: dict[str, int] = {}
    for topic in inputs:
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                     cached=True)
        except (KafkaException, RuntimeError):
            continue
        if high >= 0:
            out[topic] = max(0, high - next_offsets.get(topic, 0))
    return out


def log_end_offsets(admin: AdminClient, parts: list[tuple[str, int]],
                    timeout: float = 30.0) -> dict[tuple[str, int], int]:
    """The log end offset (read_uncommitted: past open transactions and markers) of each
    ``(topic, partition)``, in one ListOffsets request, retrying transient errors."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            futures = admin.list_offsets(
                {TopicPartition(t, p): OffsetSpec.latest() for t, p in parts},
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=max(1.0, deadline - time.monotonic()))
            return {(tp.topic, tp.partition): int(f.result().offset)
                    for tp, f in futures.items()}
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in _TRANSIENT or is_unavailable(error)):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)

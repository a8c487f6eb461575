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
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from confluent_kafka import Consumer, Message

from millpond.changelog.errors import BadChangelogRecordError
from millpond.kafka.reading import read_range
from millpond.serdes import BytesSerde, Serde
from millpond.stores.malloc import release_free_memory

log = logging.getLogger(__name__)

T = TypeVar("T")

PROGRESS_EVERY_S = 3.0
# Give the heap's freed memory back to the OS after every this many restored bytes, and at
# the end (millpond.stores.malloc): a restore frees as much as it allocates, in pieces that
# glibc otherwise keeps, while the job's caches fill beside it.
TRIM_EVERY_BYTES = 32 * 1024 * 1024


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
    bad_records: int = 0  # records the serdes could not decode, left out (bad.records=skip)

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


class RecordCheck:
    """Decodes every changelog record with the store's serdes before restore writes it, so a
    record the store could not read is never copied into it silently.

    A batch is decoded in one pass; only a batch with a failure is gone through record by
    record. A bad record raises :class:`BadChangelogRecordError` naming the store, topic,
    partition, offset and key (``skip=False``, ``changelog.bad.records=fail``) or is left
    out, counted in ``RestoreStats.bad_records`` and logged (``skip=True``).
    """

    def __init__(self, key_serde: Serde[Any], msg_serde: Serde[Any], skip: bool = False) -> None:
        self.key_serde, self.msg_serde, self.skip = key_serde, msg_serde, skip
        # raw bytes decode to themselves: nothing to check
        self.needed = not (isinstance(key_serde, BytesSerde) and isinstance(msg_serde, BytesSerde))

    def __call__(self, stats: RestoreStats, batch: list[Message], keys: list[Any],
                 values: list[Any]) -> list[tuple[Any, Any]]:
        """The (key, value) pairs of ``batch`` to write."""
        kdec, vdec = self.key_serde.from_bytes, self.msg_serde.from_bytes
        try:
            for key in keys:
                kdec(key)
            for value in values:
                if value is not None:
                    vdec(value)
            return list(zip(keys, values, strict=True))
        except Exception:  # noqa: BLE001 - find the bad record(s) below, one by one
            pass
        good: list[tuple[Any, Any]] = []
        for msg, key, value in zip(batch, keys, values, strict=True):
            try:
                kdec(key)
                if value is not None:
                    vdec(value)
            except Exception as exc:  # noqa: BLE001 - any serde failure is a bad record
                self._bad(stats, msg, key, exc)
                continue
            good.append((key, value))
        return good

    def _bad(self, stats: RestoreStats, msg: Message, key: Any, exc: Exception) -> None:
        try:
            shown = repr(self.key_serde.from_bytes(key))
        except Exception:  # noqa: BLE001 - the key itself does not decode: show its bytes
            shown = repr(key)
        where = (f"store {stats.store}: changelog record {stats.topic}[{stats.partition}]"
                 f"@{msg.offset()} (key {shown:.80}) does not decode ({exc})")
        if not self.skip:
            raise BadChangelogRecordError(
                f"{where}; nothing of it was written into the store. Set "
                f"stores.{stats.store}.changelog.bad.records=skip to leave such records out "
                f"(counted and logged; the key keeps its earlier value)")
        stats.bad_records += 1
        log.warning("%s: skipped (stores.%s.changelog.bad.records=skip); %d skipped so far",
                    where, stats.store, stats.bad_records)


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


def restore_steps(
    engine: Any, consumer: Consumer, stats: RestoreStats, listener: RestoreListener | None = None,
    check: RecordCheck | None = None,
) -> Generator[RestoreStats, None, RestoreStats]:
    """Replay ``stats.topic[stats.partition]`` from ``start_offset`` to ``end_offset`` into
    ``engine``, yielding ``stats`` after each written batch (at most :data:`millpond.kafka.reading.BATCH` records).

    Returns ``stats`` (as ``StopIteration.value``) once the engine is flushed. Closing the
    generator early unassigns ``consumer`` and leaves the engine open but not flushed: what
    was written is not durable and no ``OFFSET`` describes it. With ``check``, every record
    is decoded with the store's serdes first (see :class:`RecordCheck`).
    """
    listener = listener or NullListener()
    stats.position = stats.start_offset
    listener.on_restore_start(stats)
    began = last_log = time.monotonic()
    total = max(0, stats.end_offset - stats.start_offset)
    write_batch = engine.write_batch
    trimmed_at = stats.bytes
    # closing(): an early close of this generator unassigns the consumer at once, not at GC.
    with closing(read_range(consumer, stats.topic, stats.partition, stats.start_offset,
                            stats.end_offset, idle=True)) as batches:
        for batch in batches:
            if not batch:  # nothing arrived yet: let the caller go on meanwhile
                yield stats
                continue
            keys = list(map(Message.key, batch))
            values = list(map(Message.value, batch))
            if check is not None and check.needed:
                write_batch(check(stats, batch, keys, values), disable_wal=True)
            else:
                write_batch(list(zip(keys, values, strict=True)), disable_wal=True)
            stats.records += len(keys)
            stats.position = batch[-1].offset() + 1  # type: ignore[operator]
            stats.bytes += sum(map(len, keys)) + sum(map(len, filter(None, values)))  # type: ignore[arg-type]
            if stats.bytes >= trimmed_at + TRIM_EVERY_BYTES:
                trimmed_at = stats.bytes
                release_free_memory()
            listener.on_batch_restored(stats)
            now = time.monotonic()
            if now - last_log >= PROGRESS_EVERY_S:
                last_log = now
                stats.seconds = now - began
                log.info("restoring %s %s[%d]: %d / ~%d records (%.0f rec/s)", stats.store,
                         stats.topic, stats.partition, stats.records, total, stats.records_per_s)
            yield stats
    engine.flush()
    # What the restore freed (batches, flushed memtables) goes back to the OS, not under
    # what the job allocates next (millpond.stores.malloc).
    release_free_memory()
    stats.seconds = time.monotonic() - began
    stats.position = max(stats.position, stats.end_offset)
    if stats.bad_records:
        log.warning("store %s: %d records of %s[%d] did not decode and were left out "
                    "(changelog.bad.records=skip)", stats.store, stats.bad_records, stats.topic,
                    stats.partition)
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

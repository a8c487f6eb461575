"""Recovery of one store partition: choose a starting point, restore, trim.

The starting point is, in order: the live directory if its ``OFFSET`` says it is clean;
else the checkpoint taken at the last commit; else nothing (full restore). Any doubt
(offset outside the changelog's range, a corrupt directory or ``OFFSET``, a local store
ahead of the restore target) means a full restore with a warning, never wrong state.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from millpond.changelog import local
from millpond.changelog.checkpoint import (
    NO_OFFSET,
    StoreOffset,
    clear_offset_file,
    read_offset_file,
    write_offset_file,
)
from millpond.changelog.errors import ChangelogLostError, CheckpointError
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.producer import TrackedProducer
from millpond.changelog.restore import (
    BATCH,
    RestoreListener,
    RestoreStats,
    read_range,
    restore_steps,
    run_steps,
)

log = logging.getLogger(__name__)


class RecoveryWarning(UserWarning):
    """Local state could not be trusted and was rebuilt from the changelog."""


@dataclass
class RecoveryResult:
    """How a store came back: its restore stats and the changelog offset it now reflects."""

    stats: RestoreStats
    offset: int  # last changelog offset reflected (NO_OFFSET if none)
    trimmed: int = 0  # keys re-written after the checkpoint (effectively-once)


def _warn(message: str) -> None:
    log.warning(message)
    warnings.warn(message, RecoveryWarning, stacklevel=3)


def local_start(live: Path, topic: str, partition: int) -> int | None:
    """The offset the local directory reflects after choosing live or checkpoint; None = none."""
    try:
        clean = read_offset_file(live)
    except CheckpointError as exc:
        _warn(f"{exc}; using the last commit's checkpoint or a full restore")
        clean = None
    if clean is not None and (clean.topic, clean.partition) == (topic, partition):
        return clean.offset
    ckpt = local.checkpoint_dir(live)
    try:
        saved = read_offset_file(ckpt) if ckpt.is_dir() else None
    except CheckpointError as exc:
        _warn(f"{exc}; doing a full restore")
        saved = None
    if saved is not None and (saved.topic, saved.partition) == (topic, partition):
        local.replace_with_checkpoint(live)
        return saved.offset
    return None


def recover_store(
    *,
    store: str,
    live: Path | None,
    open_engine: Callable[[], Any],
    topic: str,
    partition: int,
    guarantee: Guarantee,
    checkpointed: int | None,
    consumer: Consumer,
    producer: TrackedProducer | None,
    listener: RestoreListener | None = None,
) -> tuple[Any, RecoveryResult]:
    """Open the engine of ``store`` and bring it to the state the guarantee requires.

    ``live`` is the store directory (None for in-memory engines); ``checkpointed`` is the
    changelog offset in the job's last checkpoint (None if there is none). Returns the
    opened engine and what was done. :func:`recover_store_steps` without the pauses.
    """
    return run_steps(recover_store_steps(
        store=store, live=live, open_engine=open_engine, topic=topic, partition=partition,
        guarantee=guarantee, checkpointed=checkpointed, consumer=consumer, producer=producer,
        listener=listener))


def recover_store_steps(
    *,
    store: str,
    live: Path | None,
    open_engine: Callable[[], Any],
    topic: str,
    partition: int,
    guarantee: Guarantee,
    checkpointed: int | None,
    consumer: Consumer,
    producer: TrackedProducer | None,
    listener: RestoreListener | None = None,
) -> Generator[RestoreStats, None, tuple[Any, RecoveryResult]]:
    """:func:`recover_store` in steps: yields the restore's stats after each restored batch
    (and during the trim), returns ``(engine, result)`` as ``StopIteration.value``.

    Closing the generator early (or any error) closes the engine it opened and unassigns
    ``consumer``. The live directory's ``OFFSET`` is removed before anything is replayed
    into it and written only once the restore (and trim) is complete, so an interrupted
    recovery never leaves a directory a later recovery would take as clean.
    """
    tp = TopicPartition(topic, partition)
    low, high = (int(x) for x in consumer.get_watermark_offsets(tp, timeout=30))
    if checkpointed is not None and checkpointed >= high:
        raise ChangelogLostError(
            f"changelog {topic}[{partition}] ends at offset {high} but the last checkpoint "
            f"says store {store} wrote offset {checkpointed}: the topic was deleted, "
            f"recreated or truncated and restoring would lose state. If the local store is "
            f"intact, re-seed the changelog with `millpond restore --from-local`."
        )
    if guarantee.restores_to_checkpoint:
        end = (checkpointed + 1) if checkpointed is not None else low
    else:
        end = high  # LSO for read_committed consumers

    start: int | None = None
    if live is not None:
        start_offset = local_start(live, topic, partition)
        if start_offset is not None:
            if start_offset + 1 > end:
                _warn(f"local store {live} is at changelog offset {start_offset}, ahead of the "
                      f"restore target {end - 1} of {topic}[{partition}]; doing a full restore")
            elif start_offset != NO_OFFSET and start_offset + 1 < low:
                _warn(f"local store {live} is at changelog offset {start_offset} but "
                      f"{topic}[{partition}] now starts at {low}; doing a full restore")
            else:
                start = start_offset + 1
        if start is None:
            local.wipe(live)
        # From here the directory holds writes its OFFSET does not describe until it is
        # rewritten below (the checkpoint directory keeps its own OFFSET).
        clear_offset_file(live)
    full = start is None
    begin = low if start is None else max(start, low)
    try:
        engine = open_engine()
    except Exception as exc:  # rocksdict raises plain Exception for corrupt DBs
        if live is None:
            raise
        _warn(f"local store {live} could not be opened ({exc}); doing a full restore")
        local.wipe(live)
        engine = open_engine()
        full, begin = True, low
    try:
        stats = RestoreStats(store, topic, partition, begin, end, full=full)
        yield from restore_steps(engine, consumer, stats, listener)
        offset = end - 1 if end > 0 else NO_OFFSET
        trimmed = 0
        if guarantee.restores_to_checkpoint and high > end:
            if producer is None:
                raise ValueError("effectively-once recovery needs a producer to trim the changelog")
            keys: set[bytes] = set()
            with closing(read_range(consumer, topic, partition, end, high)) as batches:
                for batch in batches:
                    keys.update(m.key() for m in batch)  # type: ignore[misc]
                    yield stats
            for key in sorted(keys):
                producer.send(topic, partition, key, engine.get(key))
                trimmed += 1
                if trimmed % BATCH == 0:
                    yield stats
            log.info("store %s %s[%d]: re-wrote %d keys written after checkpoint offset %d",
                     store, topic, partition, trimmed, end - 1)
        if live is not None:
            write_offset_file(live, StoreOffset(store, topic, partition, offset))
    except BaseException:
        # The caller never receives the engine: close it (GeneratorExit included).
        try:
            engine.close()
        except Exception as exc:
            log.warning("closing store %s after an interrupted recovery: %s", store, exc)
        raise
    return engine, RecoveryResult(stats, offset, trimmed)

"""Recovery of one store partition: observe, plan, then act.

* :func:`observe` gathers the facts and changes nothing: the changelog's watermarks, the
  checkpointed offset, and the ``OFFSET`` files of the live directory and of the last
  commit's checkpoint directory (or why they could not be read).
* :func:`plan_recovery` is pure: it picks the copy to start from (the live directory
  if its ``OFFSET`` says it is clean; else the last commit's checkpoint; else the newest
  remote snapshot consistent with the checkpoint, see :mod:`millpond.changelog.snapshots`;
  else nothing), the
  changelog range to replay, whether to trim, and the warnings; or it raises
  :class:`ChangelogLostError`. Any doubt (a local offset outside the changelog's range, a
  corrupt ``OFFSET``, a local store ahead of the restore target) means a full restore with
  a warning, never wrong state.
* :func:`carry_out` does it: replace or wipe the directory (or download a snapshot into it,
  falling back to the next older one, then to nothing, when one fails verification), open
  the engine (a store that cannot be opened is wiped and restored in full), replay in
  steps, trim, write ``OFFSET``.

:func:`recover_store_steps` and :func:`recover_store` chain the three.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

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
from millpond.changelog.restore import (
    RecordCheck,
    RestoreListener,
    RestoreStats,
    restore_steps,
    run_steps,
)
from millpond.changelog.snapshots import RemoteSnapshots, SnapshotRef
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import BATCH, batch_bytes, read_range, watermarks

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


# -- observe ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StorePartition:
    """The store partition being recovered and where its local copy lives."""

    store: str
    topic: str  # the store's changelog topic
    partition: int
    live: Path | None  # the live directory; None for in-memory engines


@dataclass(frozen=True)
class RecoveryIO:
    """What carrying out a recovery reads and writes through: the engine to open, the
    changelog consumer, the producer that re-writes trimmed keys (effectively-once), the
    listener told of restore progress, the remote snapshots (if backups are on) and the
    check each restored record passes."""

    open_engine: Callable[[], Any]
    consumer: Consumer
    producer: TrackedProducer | None = None
    listener: RestoreListener | None = None
    remote: RemoteSnapshots | None = None
    check: RecordCheck | None = None  # decodes each restored record (changelog.bad.records)


@dataclass(frozen=True)
class OffsetFile:
    """What a directory's ``OFFSET`` file says: its content, or why it cannot be trusted."""

    offset: StoreOffset | None = None  # None: absent, or unreadable (then ``error`` says why)
    error: str | None = None

    @classmethod
    def read(cls, directory: Path) -> OffsetFile:
        """Read ``directory``'s ``OFFSET``."""
        try:
            return cls(read_offset_file(directory))
        except CheckpointError as exc:
            return cls(error=str(exc))

    def offset_for(self, topic: str, partition: int) -> int | None:
        """The offset this file records for ``topic[partition]``; None if it names another."""
        o = self.offset
        return o.offset if o is not None and (o.topic, o.partition) == (topic, partition) else None


@dataclass(frozen=True)
class LocalState:
    """The ``OFFSET`` files of a store's live directory and of its last commit's checkpoint."""

    live: OffsetFile = OffsetFile()
    checkpoint: OffsetFile = OffsetFile()

    @classmethod
    def read(cls, live: Path) -> LocalState:
        """Read both ``OFFSET`` files of the store at ``live``."""
        ckpt = local.existing_checkpoint(live)
        return cls(OffsetFile.read(live), OffsetFile.read(ckpt) if ckpt is not None else OffsetFile())


@dataclass(frozen=True)
class Observation:
    """Everything recovery decides on, read without changing anything."""

    where: StorePartition
    guarantee: Guarantee
    low: int  # the changelog's first offset
    high: int  # its end (the LSO for read_committed consumers)
    checkpointed: int | None  # the store's offset in the job's last checkpoint; None if none
    local: LocalState | None  # None for in-memory engines (no directory)
    remote: tuple[SnapshotRef, ...] = ()  # remote snapshots, newest first (if consulted)
    remote_error: str | None = None  # why the remote snapshots could not be listed


def restore_end(guarantee: Guarantee, checkpointed: int | None, low: int, high: int) -> int:
    """The offset replay stops before: past the checkpoint (effectively-/exactly-once) or
    the changelog's end (at-least-once)."""
    if guarantee.restores_to_checkpoint:
        return (checkpointed + 1) if checkpointed is not None else low
    return high


def observe(
    where: StorePartition, guarantee: Guarantee, checkpointed: int | None, consumer: Consumer,
    remote: RemoteSnapshots | None = None,
) -> Observation:
    """Read watermarks and ``OFFSET`` files: the facts :func:`plan_recovery` needs. The
    remote snapshots are listed only when no local copy is usable (a lost store)."""
    low, high = watermarks(consumer, where.topic, where.partition)
    state = LocalState.read(where.live) if where.live is not None else None
    if remote is None or state is None:
        return Observation(where, guarantee, low, high, checkpointed, state)
    _, offset, _ = choose_local_copy(state, where.topic, where.partition)
    end = restore_end(guarantee, checkpointed, low, high)
    if offset is not None and offset + 1 <= end and (offset == NO_OFFSET or offset + 1 >= low):
        return Observation(where, guarantee, low, high, checkpointed, state)
    try:
        refs = tuple(remote.snapshots(where.store, where.partition))
    except Exception as exc:  # an unreachable object store must not stop a restore
        return Observation(where, guarantee, low, high, checkpointed, state,
                           remote_error=f"{type(exc).__name__}: {exc}")
    return Observation(where, guarantee, low, high, checkpointed, state, refs)


# -- plan -------------------------------------------------------------------------------------


class LocalCopy(StrEnum):
    """What a store's content starts from before the changelog tail is replayed."""

    LIVE = "live"  # the live directory as it is: its OFFSET says it is clean
    CHECKPOINT = "checkpoint"  # the last commit's RocksDB checkpoint, copied over the live dir
    REMOTE = "remote"  # a remote snapshot (object store), downloaded into the live dir
    NOTHING = "nothing"  # an empty store (the live directory, if any, is wiped): full restore


@dataclass(frozen=True)
class RecoveryPlan:
    """What recovery will do; :func:`plan_recovery` decides it, :func:`carry_out` does it."""

    copy: LocalCopy
    begin: int  # first changelog offset to replay
    end: int  # replay stops before this offset: the restore target is end - 1
    trim_end: int | None  # effectively-once: re-write every key written in [end, trim_end)
    low: int  # the changelog's first offset, where a fallback full restore begins
    warnings: tuple[str, ...] = ()
    snapshots: tuple[SnapshotRef, ...] = ()  # REMOTE: usable snapshots, newest first


    @property
    def full(self) -> bool:
        """Whether the whole changelog is replayed into an empty store."""
        return self.copy is LocalCopy.NOTHING

    @property
    def offset(self) -> int:
        """The changelog offset the store reflects once the plan is done."""
        return self.end - 1 if self.end > 0 else NO_OFFSET

    def as_full_restore(self) -> RecoveryPlan:
        """This plan starting from nothing (for a local copy that turns out unusable)."""
        return replace(self, copy=LocalCopy.NOTHING, begin=self.low, snapshots=())

    def from_snapshot(self, ref: SnapshotRef) -> RecoveryPlan:
        """This plan starting from remote snapshot ``ref`` (one of ``snapshots``)."""
        return replace(self, copy=LocalCopy.REMOTE, begin=max(ref.offset + 1, self.low),
                       snapshots=(ref,))


def choose_local_copy(
    state: LocalState, topic: str, partition: int,
) -> tuple[LocalCopy, int | None, list[str]]:
    """Live directory if clean, else the checkpoint, else nothing; with the offset the chosen
    copy reflects and warnings for corrupt ``OFFSET`` files. Pure."""
    warned: list[str] = []
    if state.live.error is not None:
        warned.append(f"{state.live.error}; using the last commit's checkpoint or a full restore")
    offset = state.live.offset_for(topic, partition)
    if offset is not None:
        return LocalCopy.LIVE, offset, warned
    if state.checkpoint.error is not None:
        warned.append(f"{state.checkpoint.error}; doing a full restore")
    offset = state.checkpoint.offset_for(topic, partition)
    if offset is not None:
        return LocalCopy.CHECKPOINT, offset, warned
    return LocalCopy.NOTHING, None, warned


def plan_recovery(obs: Observation) -> RecoveryPlan:
    """Decide how to bring a store back to the state its guarantee requires. No I/O.

    Raises :class:`ChangelogLostError` if the checkpoint names offsets the changelog does
    not have (deleted, recreated or truncated: its end is at or before the checkpointed
    offset, or its start is past it): restoring would silently lose state.
    """
    where, low, high = obs.where, obs.low, obs.high
    if obs.checkpointed is not None and obs.checkpointed >= high:
        raise ChangelogLostError(
            f"changelog {where.topic}[{where.partition}] ends at offset {high} but the last "
            f"checkpoint says store {where.store} wrote offset {obs.checkpointed}: the topic "
            f"was deleted, recreated or truncated and restoring would lose state. If the local "
            f"store is intact, re-seed the changelog with `millpond restore --from-local`."
        )
    checkpointed = obs.checkpointed
    if checkpointed is not None and checkpointed != NO_OFFSET and checkpointed + 1 < low:
        # Compaction never moves a partition's start: deleting records does (DeleteRecords,
        # or retention under cleanup.policy=compact,delete). A start just past the checkpoint
        # is no proof of loss: a store restored from a changelog emptied that way reflects
        # offset ``low - 1`` without having written it, and checkpoints that.
        raise ChangelogLostError(
            f"changelog {where.topic}[{where.partition}] starts at offset {low} but the last "
            f"checkpoint says store {where.store} wrote offset {obs.checkpointed}: records up "
            f"to it were deleted (the topic was truncated) and restoring would lose state. If "
            f"the local store is intact, re-seed the changelog with "
            f"`millpond restore --from-local`."
        )
    end = restore_end(obs.guarantee, obs.checkpointed, low, high)  # high: the LSO
    trim_end = high if obs.guarantee.restores_to_checkpoint and high > end else None

    copy, offset, warned = (choose_local_copy(obs.local, where.topic, where.partition)
                            if obs.local is not None else (LocalCopy.NOTHING, None, []))
    if offset is not None:
        tp = f"{where.topic}[{where.partition}]"
        if offset + 1 > end:
            warned.append(f"local store {where.live} is at changelog offset {offset}, ahead of "
                          f"the restore target {end - 1} of {tp}; doing a full restore")
            copy, offset = LocalCopy.NOTHING, None
        elif offset != NO_OFFSET and offset + 1 < low:
            warned.append(f"local store {where.live} is at changelog offset {offset} but {tp} "
                          f"now starts at {low}; doing a full restore")
            copy, offset = LocalCopy.NOTHING, None
    begin = low if offset is None else max(offset + 1, low)
    plan = RecoveryPlan(copy, begin, end, trim_end, low, tuple(warned))
    if copy is LocalCopy.NOTHING and where.live is not None:
        usable, skipped = usable_snapshots(obs, end)
        warned.extend(skipped)
        plan = replace(plan, warnings=tuple(warned))
        if usable:
            # begin as from the newest; carry_out falls back to the older ones in order
            plan = replace(plan.from_snapshot(usable[0]), snapshots=usable)
    return plan


def usable_snapshots(obs: Observation, end: int) -> tuple[tuple[SnapshotRef, ...], list[str]]:
    """The remote snapshots a store may start from, newest first: of its changelog
    partition, not beyond the restore target ``end - 1`` (a snapshot newer than the
    checkpoint holds writes the checkpoint does not), and inside the changelog's range.
    With warnings for the ones left out and for an unreachable remote. Pure."""
    where = obs.where
    warned: list[str] = []
    if obs.remote_error is not None:
        warned.append(f"backups of store {where.store} partition {where.partition} could not "
                      f"be listed ({obs.remote_error}); restoring from the changelog")
    usable: list[SnapshotRef] = []
    for ref in obs.remote:
        if (ref.topic, ref.partition) != (where.topic, where.partition):
            warned.append(f"snapshot {ref.id} of store {where.store} is of "
                          f"{ref.topic}[{ref.partition}], not {where.topic}[{where.partition}]"
                          "; not used")
        elif ref.offset + 1 > end:
            warned.append(f"snapshot {ref.id} of store {where.store} partition "
                          f"{where.partition} is at changelog offset {ref.offset}, beyond the "
                          f"restore target {end - 1}; not used")
        elif ref.offset != NO_OFFSET and ref.offset + 1 < obs.low:
            warned.append(f"snapshot {ref.id} of store {where.store} partition "
                          f"{where.partition} is at changelog offset {ref.offset} but "
                          f"{where.topic}[{where.partition}] now starts at {obs.low}; not used")
        else:
            usable.append(ref)
    return tuple(usable), warned


# -- act --------------------------------------------------------------------------------------


def prepare_local_copy(live: Path, copy: LocalCopy) -> bool:
    """Make ``live`` hold ``copy``; False if the checkpoint to copy has gone."""
    if copy is LocalCopy.CHECKPOINT:
        return local.replace_with_checkpoint(live)
    if copy in (LocalCopy.NOTHING, LocalCopy.REMOTE):
        local.wipe(live)
    return True


def fetch_snapshot(where: StorePartition, plan: RecoveryPlan,
                   remote: RemoteSnapshots | None) -> tuple[RecoveryPlan, int]:
    """Download the newest of ``plan.snapshots`` that verifies into the (wiped) live
    directory; each bad one is skipped with a warning for the next older one. Returns the
    plan from the snapshot used (or a full restore) and the bytes downloaded."""
    assert where.live is not None
    for ref in plan.snapshots if remote is not None else ():
        assert remote is not None
        began = time.monotonic()
        local.wipe(where.live)
        try:
            size = remote.fetch(ref, where.live)
        except Exception as exc:  # corrupt, missing or unreachable: try the next older one
            _warn(f"snapshot {ref.id} of store {where.store} partition {where.partition} "
                  f"cannot be used ({type(exc).__name__}: {exc}); trying the next older "
                  "snapshot or the changelog")
            continue
        log.info("store %s %s[%d]: downloaded snapshot %s (changelog offset %d), %d bytes in "
                 "%.1fs", where.store, where.topic, where.partition, ref.id, ref.offset, size,
                 time.monotonic() - began)
        return plan.from_snapshot(ref), size
    if plan.snapshots:
        _warn(f"no snapshot of store {where.store} partition {where.partition} could be "
              "used; doing a full restore from the changelog")
    local.wipe(where.live)
    return plan.as_full_restore(), 0


def carry_out(
    where: StorePartition, plan: RecoveryPlan, io: RecoveryIO,
) -> Generator[RestoreStats, None, tuple[Any, RecoveryResult]]:
    """Do ``plan``, yielding the restore's stats after each replayed batch (and during the
    trim); returns ``(engine, result)`` as ``StopIteration.value``.

    Closing the generator early (or any error) closes the engine it opened and unassigns
    ``consumer``. The live directory's ``OFFSET`` is removed before anything is replayed
    into it and written only once the restore (and trim) is complete, so an interrupted
    recovery never leaves a directory a later recovery would take as clean.
    """
    open_engine, consumer, producer = io.open_engine, io.consumer, io.producer
    if plan.trim_end is not None and producer is None:
        raise ValueError("effectively-once recovery needs a producer to trim the changelog")
    for message in plan.warnings:
        _warn(message)
    live = where.live
    downloaded, download_seconds = 0, 0.0
    if live is not None:
        if plan.copy is LocalCopy.REMOTE:
            began = time.monotonic()
            plan, downloaded = fetch_snapshot(where, plan, io.remote)
            download_seconds = time.monotonic() - began
        elif not prepare_local_copy(live, plan.copy):
            _warn(f"the checkpoint of local store {live} disappeared; doing a full restore")
            plan = plan.as_full_restore()
            prepare_local_copy(live, plan.copy)
        # From here the directory holds writes its OFFSET does not describe until it is
        # rewritten below (the checkpoint directory keeps its own OFFSET).
        clear_offset_file(live)

    def stats_of(plan: RecoveryPlan) -> RestoreStats:
        return RestoreStats(where.store, where.topic, where.partition, plan.begin, plan.end,
                            full=plan.full, downloaded=downloaded,
                            download_seconds=download_seconds,
                            snapshot=plan.snapshots[0].id if plan.snapshots else None)

    # Each of the steps up to the restore's reads takes 5-15 ms (the observation and local
    # copy, the store's open): a caller stepping this in the run loop goes on in between
    # (in one step they held the tasks that stay 30-36 ms, a scale-in's handover bench).
    yield stats_of(plan)
    try:
        engine = open_engine()
    except Exception as exc:  # rocksdict raises plain Exception for corrupt DBs
        if live is None:
            raise
        _warn(f"local store {live} could not be opened ({exc}); doing a full restore")
        plan = plan.as_full_restore()
        prepare_local_copy(live, plan.copy)
        engine = open_engine()
    try:
        stats = stats_of(plan)
        yield stats
        yield from restore_steps(engine, consumer, stats, io.listener, io.check)
        trimmed = 0
        if plan.trim_end is not None:
            assert producer is not None  # checked above
            trimmed = yield from _trim(where, engine, consumer, producer, plan, stats)
        if live is not None:
            write_offset_file(live, StoreOffset(where.store, where.topic, where.partition,
                                                plan.offset))
    except BaseException:
        # The caller never receives the engine: close it (GeneratorExit included).
        try:
            engine.close()
        except Exception as exc:
            log.warning("closing store %s after an interrupted recovery: %s", where.store, exc)
        raise
    return engine, RecoveryResult(stats, plan.offset, trimmed)


KEY_COST = 100  # bytes a key in a Python set costs besides its own: object and slot


def _trim(
    where: StorePartition, engine: Any, consumer: Consumer, producer: TrackedProducer,
    plan: RecoveryPlan, stats: RestoreStats,
) -> Generator[RestoreStats, None, int]:
    """Re-write the current value (or a tombstone) of every key written after the restore
    target, so the changelog agrees with the restored store; returns how many re-writes.

    The keys are gathered a restore batch's worth of bytes at a time and re-written each
    time that fills (memory bounded by the plan, not by the tail: a tail of 3M keys held
    them all, 488 MiB in a 128 MiB job). A key in more than one such set is re-written more
    than once, always with the same restored value."""
    assert plan.trim_end is not None
    limit = batch_bytes()
    keys: set[bytes] = set()
    held = 0
    trimmed = 0

    def rewrite() -> Generator[RestoreStats, None, None]:
        nonlocal trimmed, held
        for n, key in enumerate(sorted(keys), 1):
            producer.send(where.topic, where.partition, key, engine.get(key))
            if n % BATCH == 0:
                yield stats
        trimmed += len(keys)
        keys.clear()
        held = 0

    with closing(read_range(consumer, where.topic, where.partition, plan.end,
                            plan.trim_end, idle=True)) as batches:
        for batch in batches:
            for m in batch:
                key: bytes = m.key()  # type: ignore[assignment]
                if key not in keys:
                    keys.add(key)
                    held += len(key) + KEY_COST
            if held >= limit:
                yield from rewrite()
            yield stats
    yield from rewrite()
    log.info("store %s %s[%d]: re-wrote %d keys written after checkpoint offset %d",
             where.store, where.topic, where.partition, trimmed, plan.end - 1)
    return trimmed


# -- together ---------------------------------------------------------------------------------


def local_start(live: Path, topic: str, partition: int) -> int | None:
    """Make ``live`` the best local copy and return the changelog offset it reflects.

    Not a getter: if the live directory is not clean it is REPLACED by the last commit's
    checkpoint (kept as it is when there is none). None if no local copy is usable.
    """
    copy, offset, warned = choose_local_copy(LocalState.read(live), topic, partition)
    for message in warned:
        _warn(message)
    if copy is LocalCopy.CHECKPOINT and not local.replace_with_checkpoint(live):
        return None
    return offset


def recover_store(
    where: StorePartition, guarantee: Guarantee, checkpointed: int | None, io: RecoveryIO,
) -> tuple[Any, RecoveryResult]:
    """Open the engine of ``where`` and bring it to the state the guarantee requires.

    ``where.live`` is the store directory (None for in-memory engines); ``checkpointed`` is
    the changelog offset in the job's last checkpoint (None if there is none). Returns the
    opened engine and what was done. :func:`recover_store_steps` without the pauses.
    """
    return run_steps(recover_store_steps(where, guarantee, checkpointed, io))


def recover_store_steps(
    where: StorePartition, guarantee: Guarantee, checkpointed: int | None, io: RecoveryIO,
) -> Generator[RestoreStats, None, tuple[Any, RecoveryResult]]:
    """:func:`recover_store` in steps: observe, plan, then :func:`carry_out` (which yields
    after each restored batch and during the trim); returns ``(engine, result)`` as
    ``StopIteration.value``. Closing it early closes the engine and unassigns ``io.consumer``.
    """
    plan = plan_recovery(observe(where, guarantee, checkpointed, io.consumer, io.remote))
    return (yield from carry_out(where, plan, io))

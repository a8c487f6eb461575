"""A task's stores: opened through recovery, stacked in layers, checkpointed at commit.

Layers per store, top to bottom (Samza's stack, built by millpond.stores.factory):
null-safe -> cached -> serialized -> logged -> engine. The logged layer mirrors writes to the
store's changelog partition.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer

from millpond.changelog import local
from millpond.changelog.checkpoint import StoreOffset, clear_offset_file, write_offset_file
from millpond.changelog.generations import resolve
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.logged import LoggedStore
from millpond.changelog.recovery import (
    RecoveryIO,
    RecoveryResult,
    StorePartition,
    recover_store_steps,
)
from millpond.changelog.restore import RecordCheck, RestoreListener, RestoreStats, run_steps
from millpond.changelog.snapshots import RemoteSnapshots
from millpond.config import Config, StoreConfig
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import watermarks
from millpond.serdes import serdes_for
from millpond.sideinputs.local import open_store_engine
from millpond.sideinputs.readonly import ReadOnlyStore
from millpond.sideinputs.sources import Source, sources
from millpond.stores import InMemoryEngine, RocksDbEngine, RocksDbOptions, build_stack, permissions
from millpond.stores.api import KeyValueStore, StorageEngine
from millpond.stores.cached import CachedStore, cache_budget
from millpond.stores.engines.rocksdb import RocksSnapshot
from millpond.stores.undo import RecordJournal

if TYPE_CHECKING:
    from millpond.backup import StateBackups

log = logging.getLogger(__name__)

# A store's local checkpoint is taken again once its changelog is this many offsets past
# the last one (Kafka Streams' OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT), one store per commit
# (the others at the next commits) unless it is twice that far: what a crash replays beyond
# the checkpoint. See TaskStorage.after_commit.
LOCAL_CHECKPOINT_RECORDS = 10_000


class CheckpointBudget:
    """How many stores one commit may checkpoint locally before it must (each is ~5-25 ms
    of flushing and fsyncs while processing waits): stores reaching the threshold together
    take turns over the next commits."""

    def __init__(self, stores: int = 1) -> None:
        self.left = stores

    def take(self, overdue: bool) -> bool:
        """Whether a store due for a checkpoint takes it now (always when ``overdue``)."""
        if overdue:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def open_engine(cfg: StoreConfig, live: Path | None) -> StorageEngine:
    """Open the storage engine of ``cfg`` (RocksDB at ``live``, or in memory). ``live`` and
    the files RocksDB writes there get the mode of the store's directory (which the
    :class:`~millpond.changelog.local.StoreLock` taken first made)."""
    if cfg.factory == "inmemory" or live is None:
        return InMemoryEngine()
    mode = local.store_mode(live)
    permissions.make_dir(live, mode)
    engine = RocksDbEngine(live, RocksDbOptions.from_store_properties(cfg.properties))
    permissions.apply(live, mode)
    return engine


@dataclass
class OpenStore:
    """One opened store of a task with the layers the task and the commit need."""

    config: StoreConfig
    topic: str | None
    live: Path | None
    engine: StorageEngine
    logged: LoggedStore | None
    store: KeyValueStore[Any, Any]
    lock: local.StoreLock | None
    offset: int  # last changelog offset the engine reflects as of the last commit
    recovery: RecoveryResult | None = None
    # side-input stores: the side-input offsets to resume at (None: from their start)
    side_start: dict[str, int] | None = None
    cache: CachedStore[Any, Any] | None = None  # the object cache (its hit/miss counters)
    # changelog offset of the last commit's checkpoint directory as this process wrote it;
    # None until its first commit (the directory may be from before a restore)
    checkpointed: int | None = None
    # the engine as the last commit left it, for committed reads (millpond.query)
    snapshot: RocksSnapshot | None = None
    # side-input stores opened against a checkpoint: position key -> the side-input
    # partition it names (millpond.sideinputs.sources), what the task reads
    side_sources: dict[str, Source] = field(default_factory=dict)


@dataclass
class TaskStorage:
    """All stores of one task (one input partition)."""

    partition: int
    stores: dict[str, OpenStore] = field(default_factory=dict)
    # the checkpoint's store -> changelog topic overrides, carried into every new checkpoint
    topics: dict[str, str] = field(default_factory=dict)
    backups: StateBackups | None = None  # state backups (job.state.backup.uri), if on
    # the writes of the record being processed, undone when the record is skipped
    journal: RecordJournal = field(default_factory=RecordJournal)
    committed_reads: bool = False  # snapshot stores at each commit (job.query.address)
    # store -> entries left to write in this pass of writing ahead (plan_write_ahead)
    ahead: dict[str, int] = field(default_factory=dict)

    @classmethod
    def open_steps(
        cls, config: Config, partition: int, guarantee: Guarantee, producer: TrackedProducer | None,
        restore_consumer: Consumer, checkpointed: dict[str, int] | None,
        listener: RestoreListener | None = None, only: str | None = None,
        side_checkpointed: dict[str, dict[str, int]] | None = None,
        topics: Mapping[str, str] | None = None,
        backups: StateBackups | None = None,
        locks: Mapping[str, local.StoreLock] | None = None,
        committed_reads: bool = False,
        side_partitions: Mapping[str, int] | None = None,
    ) -> Generator[RestoreStats, None, TaskStorage]:
        """Lock, recover and layer every store of the task (or just ``only``), yielding
        after each restored batch; closing the generator early releases what it opened.

        ``side_checkpointed``: the checkpoint's side-input offsets (the runtime passes a
        dict, checking side-input stores against it); None (offline tools) opens
        side-input stores as they are. ``topics``: the checkpoint's store -> changelog topic
        (a rescaled store's generation); a store not in it uses its configured topic. With
        ``backups``, a lost store may start from a remote snapshot and commits' checkpoints
        are uploaded. ``locks``: store locks the caller already holds (an offline tool that
        locked before it wiped), handed over: the storage releases them as it closes.
        ``committed_reads``: keep a snapshot of each store as of the last commit
        (:meth:`mark_committed`). ``side_partitions``: side-input topic -> partition count,
        as the container checked them (a broadcast store reads every partition)."""
        storage = cls(partition, topics=dict(topics or {}), backups=backups,
                      committed_reads=committed_reads)
        try:
            for name, cfg in config.stores.items():
                if only is not None and name != only:
                    continue
                storage.stores[name] = yield from _open_store(
                    config, cfg, partition, guarantee, producer, restore_consumer,
                    (checkpointed or {}).get(name), listener,
                    None if side_checkpointed is None else side_checkpointed.get(name, {}),
                    storage.topics,
                    backups.remote_for(cfg) if backups is not None else None,
                    storage.journal,
                    (locks or {}).get(name),
                    side_partitions or {},
                )
        except BaseException:
            storage.close()
            raise
        storage.mark_committed()  # restored: the stores hold the last commit's state
        return storage

    @classmethod
    def open(
        cls, config: Config, partition: int, guarantee: Guarantee, producer: TrackedProducer | None,
        restore_consumer: Consumer, checkpointed: dict[str, int] | None,
        listener: RestoreListener | None = None, only: str | None = None,
        topics: Mapping[str, str] | None = None,
        backups: StateBackups | None = None,
        locks: Mapping[str, local.StoreLock] | None = None,
    ) -> TaskStorage:
        """:meth:`open_steps` run to the end (offline tools)."""
        return run_steps(cls.open_steps(config, partition, guarantee, producer,
                                        restore_consumer, checkpointed, listener, only,
                                        topics=topics, backups=backups, locks=locks))

    @property
    def restored_records(self) -> int:
        """Changelog records replayed while opening."""
        return sum(s.recovery.stats.records for s in self.stores.values() if s.recovery)

    @property
    def trimmed(self) -> int:
        """Keys re-written to changelogs during recovery (needs a commit at once)."""
        return sum(s.recovery.trimmed for s in self.stores.values() if s.recovery)

    def user_stores(self) -> dict[str, KeyValueStore[Any, Any]]:
        """The stores as the task sees them (side-input stores read-only)."""
        return {name: ReadOnlyStore(s.store, name) if s.config.side_inputs else s.store
                for name, s in self.stores.items()}

    def flush(self) -> None:
        """Write cached writes down to the engines and the changelog producer. A logged
        store's memtables are flushed when it is checkpointed locally (after_commit), not
        at every commit; an unlogged one's here (it has no other way to become durable)."""
        self.ahead.clear()  # a pass of writing ahead ends here
        for s in self.stores.values():
            if s.logged is None:
                s.store.flush()
            elif s.cache is not None:
                s.cache.write_down()

    def plan_write_ahead(self) -> None:
        """Begin one pass of writing ahead (see :meth:`write_ahead`): the entries dirty now."""
        self.ahead = {name: s.cache.dirty_count for name, s in self.stores.items()
                      if s.cache is not None and s.cache.dirty_count}

    def write_ahead(self, limit: int) -> int:
        """Write down up to ``limit`` more of the entries that were dirty when the pass
        began, oldest first (entries dirtied since wait for the commit, so a key is written
        at most twice per commit); returns how many were written."""
        written = 0
        for name in list(self.ahead):
            cache = self.stores[name].cache
            left = self.ahead[name]
            n = cache.write_ahead(min(left, limit - written)) if cache is not None else 0
            written += n
            if n == 0 or n == left:
                del self.ahead[name]
            else:
                self.ahead[name] = left - n
            if written >= limit:
                break
        return written

    def record_delivered(self, producer: TrackedProducer) -> None:
        """Advance each store's changelog offset to the last record ``producer`` has had
        acknowledged (call once its flush succeeded): the offsets the commit describes."""
        for s in self.stores.values():
            if s.topic is None:
                continue
            last = producer.last_offset(s.topic, self.partition)
            if last is not None and last > s.offset:
                s.offset = last

    def changelog_offsets(self) -> dict[str, int]:
        """Per logged store, the last changelog offset recorded as delivered."""
        return {name: s.offset for name, s in self.stores.items() if s.topic is not None}

    def after_commit(self, final: bool = False, budget: CheckpointBudget | None = None,
                     mark: bool = True) -> None:
        """Checkpoint each store's directory once the commit describes enough new content.

        A logged store written since its last local checkpoint is checkpointed again (its
        memtables flushed, a RocksDB checkpoint, ``OFFSET`` files) only when its changelog
        moved LOCAL_CHECKPOINT_RECORDS offsets past it (and ``budget``, the commit's, lets
        it), a backup of it is due, or the commit is ``final`` (the task stops or moves:
        the next owner here starts from the live directory); otherwise its live directory
        stays untrusted (no ``OFFSET``) and a crash restores from the older checkpoint
        plus the changelog records since, as with Kafka Streams' checkpoint-file
        threshold. That keeps ~5-25 ms of flushing and fsyncs per store out of most
        commits, which stop the run loop. ``mark``: then :meth:`mark_committed` (a
        pipelined commit calls it on the run loop's thread, where queries read the
        snapshots)."""
        for name, s in self.stores.items():
            if s.live is not None:  # RocksDB's files since the last commit get the store's mode
                permissions.apply(s.live, local.store_mode(s.live))
            if s.live is None or s.topic is None:
                continue
            if (not final and s.logged is not None and s.logged.dirty
                    and s.checkpointed is not None
                    and local.checkpoint_dir(s.live).exists()
                    and not (self.backups is not None
                             and self.backups.due(s.config, self.partition))):
                moved = s.offset - s.checkpointed
                if moved < LOCAL_CHECKPOINT_RECORDS or not (budget or CheckpointBudget()).take(
                        overdue=moved >= 2 * LOCAL_CHECKPOINT_RECORDS):
                    continue
            offset = StoreOffset(name, s.topic, self.partition, s.offset)
            if s.logged is not None:
                s.logged.sync()  # WAL-less writes are durable only once memtables are flushed
            # Not dirty is not enough: after a restore replayed records into the store
            # (or downloaded a snapshot), the checkpoint directory beside it is from before
            # and would be uploaded as a backup of the restored offset.
            if (s.logged is None or s.logged.dirty or s.checkpointed != s.offset
                    or not local.checkpoint_dir(s.live).exists()):
                tmp = Path(tempfile.mkdtemp(prefix=".ckpt-", dir=s.live.parent))
                tmp.rmdir()  # RocksDB creates the checkpoint directory itself
                s.engine.checkpoint(tmp)
                write_offset_file(tmp, offset)
                local.install_checkpoint(tmp, s.live)
                s.checkpointed = s.offset
            write_offset_file(s.live, offset)
            if s.logged is not None:
                s.logged.mark_clean()
            if self.backups is not None:
                self.backups.after_checkpoint(s.config, s.topic, self.partition,
                                              local.checkpoint_dir(s.live), s.offset)
        if mark:
            self.mark_committed()

    def mark_committed(self) -> None:
        """With committed reads on: snapshot each logged RocksDB store as it is now, the
        state the commit made durable (releasing the previous snapshot), and track the keys
        written to its engine from now on (object-cache evictions, a task's scan's
        write-down): only those can differ from the snapshot until the next commit."""
        if not self.committed_reads:
            return
        for s in self.stores.values():
            if s.logged is None or not isinstance(s.engine, RocksDbEngine):
                continue
            if s.snapshot is not None:
                s.snapshot.release()
            s.snapshot = s.engine.snapshot()
            s.logged.touched, s.logged.overflowed = set(), False

    def close(self) -> None:
        """Close engines and release locks (no flush: the caller commits first if it wants)."""
        for s in self.stores.values():
            try:
                s.engine.close()
            except Exception as exc:  # closing must release the lock even if the engine fails
                log.warning("closing store %s: %s", s.config.name, exc)
            if s.live is not None:  # closing may flush a memtable to a new SST file
                try:
                    permissions.apply(s.live, local.store_mode(s.live))
                except OSError as exc:
                    log.warning("setting the modes in %s: %s", s.live, exc)
            if s.lock is not None:
                s.lock.release()
        self.stores.clear()


def _open_store(
    config: Config, cfg: StoreConfig, partition: int, guarantee: Guarantee,
    producer: TrackedProducer | None, consumer: Consumer, checkpointed: int | None,
    listener: RestoreListener | None, side_checkpointed: dict[str, int] | None = None,
    topics: Mapping[str, str] | None = None, remote: RemoteSnapshots | None = None,
    journal: RecordJournal | None = None,
    held: local.StoreLock | None = None,
    side_partitions: Mapping[str, int] | None = None,
) -> Generator[RestoreStats, None, OpenStore]:
    key_serde, msg_serde = serdes_for(config, cfg)
    persistent = cfg.factory != "inmemory"
    live = (local.store_dir(config.job.logged_store_base_dir, config.job.name, cfg.name, partition)
            if persistent else None)
    lock = held
    if live is not None and lock is None:
        lock = local.StoreLock(live, config.job.state_permissions)
        lock.acquire()
    try:
        side_start, side_sources = None, {}
        if cfg.side_inputs and side_checkpointed is not None:  # trusted only as checkpointed
            side_sources = sources(cfg, partition, (side_partitions or {}).get)
            engine, side_start = open_store_engine(
                cfg.name, live, side_checkpointed, list(side_sources),
                lambda: open_engine(cfg, live), lambda k: watermarks(consumer, *side_sources[k]))
            recovery, topic, offset = None, None, -1
        elif cfg.changelog is None:
            engine = open_engine(cfg, live)
            recovery = None
            topic = None
            offset = -1
        else:
            topic = resolve(config, cfg, topics)
            if producer is not None:
                producer.watch_offsets(topic)  # before recovery's trim re-writes keys there
            engine, recovery = yield from recover_store_steps(
                StorePartition(cfg.name, topic, partition, live), guarantee, checkpointed,
                RecoveryIO(lambda: open_engine(cfg, live), consumer, producer, listener, remote,
                           RecordCheck(key_serde, msg_serde, cfg.bad_records == "skip")))
            offset = recovery.offset
        log_layer = None
        if topic is not None and producer is not None:
            producer.too_large_hints[topic] = (
                f"store {cfg.name}: a value too large for its changelog; "
                f"stores.{cfg.name}.drop.large.messages=true skips such values (counted and "
                f"logged) and disallow.large.messages=true stops at them naming the key, "
                f"both above stores.{cfg.name}.changelog.max.message.size.bytes "
                f"(now {cfg.max_message_size})")
            on_dirty = (lambda d=live: clear_offset_file(d)) if live is not None else None
            log_layer = partial(LoggedStore, producer=producer, topic=topic, partition=partition,
                                on_dirty=on_dirty)
        stack = build_stack(cfg.name, engine, key_serde, msg_serde, cfg.object_cache_size,
                            cfg.write_batch_size, cache_max_bytes=cfg.object_cache_max_bytes,
                            logged=log_layer, large_messages=cfg.large_messages,
                            max_message_size=cfg.max_message_size,
                            journal=None if cfg.side_inputs else journal)
        budget = cache_budget()
        if stack.cache is not None and budget is not None \
                and not (cfg.properties.get("object.cache.max.bytes") or "").strip():
            budget.register(stack.cache)  # a share of the process's object caches' budget
        return OpenStore(cfg, topic, live, engine, stack.logged, stack.store, lock, offset,
                         recovery, side_start, stack.cache, side_sources=side_sources)
    except BaseException:
        if lock is not None:
            lock.release()
        raise

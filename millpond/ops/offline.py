"""Operations on a job's state while the job is stopped: restore, inspect, checkpoints.

These back the ``millpond restore|checkpoint|changelog|store`` commands. They take the
same store locks as a running task, so they refuse to touch a store a job has open.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from millpond.changelog import local
from millpond.changelog.checkpoint import (
    Checkpoint,
    DamagedRecord,
    task_name,
)
from millpond.changelog.errors import (
    ChangelogRefusedError,
    CheckpointError,
    CheckpointRefusedError,
    StoreLockedError,
)
from millpond.changelog.generations import job_topics, resolve
from millpond.changelog.restore import RestoreListener, RestoreStats
from millpond.config import StoreConfig
from millpond.job import Job
from millpond.kafka.producer import TrackedProducer
from millpond.tasks.storage import TaskStorage, open_engine


def restore(
    job: Job, store: str | None = None, partitions: list[int] | None = None, full: bool = False,
    listener: RestoreListener | None = None, from_backup: bool = False,
) -> list[RestoreStats]:
    """Rebuild local stores from their changelogs as the job's guarantee prescribes; with
    ``from_backup``, local state is wiped and each store starts from its newest usable
    snapshot in ``job.state.backup.uri`` (then the changelog tail)."""
    backups = None
    if from_backup:
        from millpond.backup import StateBackups

        backups = StateBackups(job.config, upload=False)  # raises when no URI is set
        full = True
    results: list[RestoreStats] = []
    checkpoints = job.checkpoints()
    topics = job_topics(checkpoints.values())
    plan: list[tuple[StoreConfig, int]] = []
    for cfg in job.stores(store):
        if cfg.changelog is None:
            continue
        topic = resolve(job.config, cfg, topics)
        count = job.admin.partition_count(topic)
        if partitions is None and count is None:
            raise ChangelogRefusedError(f"changelog {topic} of store {cfg.name} does not exist")
        plan += [(cfg, p) for p in (partitions if partitions is not None else range(count or 0))]
    # Every store directory is locked before any is wiped: one a job holds stops the
    # restore with nothing changed.
    locks = lock_stores(job, plan, "restore" + (" --from-backup" if from_backup
                                                else " --full" if full else ""))
    producer = TrackedProducer(job.producer_conf)
    consumer = job.consumer()
    try:
        for cfg, p in plan:
            lock = locks.pop((cfg.name, p), None)
            live = local.store_dir(job.config.job.logged_store_base_dir, job.config.job.name,
                                   cfg.name, p)
            try:
                if full:
                    local.wipe(live)
                    local.wipe_checkpoint(live)
            except BaseException:
                if lock is not None:
                    lock.release()
                raise
            ckpt = checkpoints.get(task_name(p))
            storage = TaskStorage.open(job.config, p, job.guarantee, producer, consumer,
                                       ckpt.changelogs if ckpt else None, listener,
                                       only=cfg.name, topics=topics, backups=backups,
                                       locks={cfg.name: lock} if lock is not None else None)
            try:
                storage.after_commit(final=True)
                rec = storage.stores[cfg.name].recovery
                if rec is not None:
                    results.append(rec.stats)
            finally:
                storage.close()
        producer.flush_and_check()
    finally:
        for lock in locks.values():
            lock.release()
        consumer.close()
    return results


def lock_stores(job: Job, plan: Iterable[tuple[StoreConfig, int]], command: str,
                ) -> dict[tuple[str, int], local.StoreLock]:
    """Take the store lock of every (store, partition) in ``plan`` that lives on disk, or
    none: a lock a process holds raises :class:`StoreLockedError` naming its pid and that
    ``command`` changed nothing."""
    locks: dict[tuple[str, int], local.StoreLock] = {}
    try:
        for cfg, p in plan:
            if cfg.factory == "inmemory" or (cfg.name, p) in locks:
                continue
            live = local.store_dir(job.config.job.logged_store_base_dir, job.config.job.name,
                                   cfg.name, p)
            lock = local.StoreLock(live, job.config.job.state_permissions)
            lock.acquire()
            locks[(cfg.name, p)] = lock
    except StoreLockedError as exc:
        for lock in locks.values():
            lock.release()
        raise StoreLockedError(f"{command}: nothing changed: {exc}") from None
    except BaseException:
        for lock in locks.values():
            lock.release()
        raise
    return locks


def set_checkpoint(job: Job, partition: int, inputs: dict[str, int], force: bool = False,
                   ) -> tuple[Checkpoint, list[str]]:
    """Overwrite a task's input offsets in the checkpoint topic (job must be stopped).

    Refuses, writing nothing, what the job could not mean: a partition the job's inputs do
    not have, a negative offset, and (unless ``force``) a topic that is not one of the job's
    inputs or an offset outside the partition's ``[log start, log end]``. Returns the
    checkpoint written and, with ``force``, a line for each check it overrode."""
    tasks = job.partitions_of_inputs()  # also: the first input exists
    if partition not in tasks:
        raise CheckpointRefusedError(
            f"--partition {partition}: the job has tasks 0..{len(tasks) - 1} (one per "
            f"partition of {job.config.job.inputs[0].topic}); nothing written")
    valid = [ref.topic for ref in job.config.job.inputs]
    forced: list[str] = []
    checked: dict[str, int] = {}
    for topic, offset in inputs.items():
        if topic not in valid and topic.startswith("kafka.") and topic[6:] in valid:
            topic = topic[6:]  # task.inputs' spelling
        if offset < 0:
            raise CheckpointRefusedError(
                f"--offset {topic}={offset}: an offset is the next record to process, 0 or "
                "more (the partition's valid range: `millpond status`); nothing written")
        checked[topic] = offset
        if topic not in valid:
            why = (f"--offset {topic}={offset}: {topic} is not an input of job "
                   f"{job.config.job.name} (its inputs: {', '.join(valid)})")
            if not force:
                raise CheckpointRefusedError(f"{why}; nothing written (--force writes it anyway)")
            forced.append(f"{why}; written as --force asked")
            continue
        low, high = _offset_range(job, topic, partition)
        if not low <= offset <= high:
            why = (f"--offset {topic}={offset}: {topic}[{partition}] holds offsets "
                   f"{low}..{high} (log start..log end; {high} resumes after its last record)")
            if not force:
                raise CheckpointRefusedError(f"{why}; nothing written (--force writes it anyway: a "
                                      "run then moves it per auto.offset.reset)")
            forced.append(f"{why}; written as --force asked")
    if group_active(job):
        raise CheckpointRefusedError(
            f"job {job.config.job.name} has live members in consumer group {job.group_id}; "
            "stop every process before setting checkpoints")
    current = job.checkpoints(lenient=True).get(task_name(partition))
    ckpt = Checkpoint(task_name(partition), partition,
                      {**(current.inputs if current else {}), **checked},
                      dict(current.changelogs) if current else {},
                      dict(current.side_inputs) if current else {},
                      dict(current.topics) if current else {},
                      dict(current.skipped) if current else {})
    job.admin.ensure_compacted(job.checkpoint_topic, len(tasks), what="checkpoint")
    producer = TrackedProducer(job.producer_conf)
    producer.send(job.checkpoint_topic, partition, ckpt.task.encode(), ckpt.to_bytes())
    producer.flush_and_check()
    return ckpt, forced


def _offset_range(job: Job, topic: str, partition: int) -> tuple[int, int]:
    """``topic[partition]``'s log start and log end (read_uncommitted: an at-least-once
    task may have read past the last stable offset)."""
    from millpond.kafka.reading import log_end_offsets, watermarks

    consumer = job.consumer()
    try:
        low, _ = watermarks(consumer, topic, partition)
    finally:
        consumer.close()
    return low, log_end_offsets(job.admin.admin, [(topic, partition)])[(topic, partition)]


def drop_record(job: Job, partition: int, offset: int) -> DamagedRecord:
    """Write a tombstone with the raw key of the checkpoint topic's record at ``offset`` of
    ``partition``, which must be one millpond cannot read under a key that names no task
    (a task's damaged checkpoint is replaced with ``checkpoint set`` instead: a tombstone
    would remove the task's position altogether). Returns the record removed."""
    from millpond.changelog.checkpoint import is_task_key
    from millpond.kafka.reading import read_range, watermarks

    topic = job.checkpoint_topic
    if job.admin.partition_count(topic) is None:
        raise CheckpointRefusedError(f"the job has no checkpoint topic {topic}; nothing to drop")
    consumer = job.consumer()
    try:
        low, high = watermarks(consumer, topic, partition)
        found = [msg for batch in read_range(consumer, topic, partition, max(low, offset),
                                             min(high, offset + 1))
                 for msg in batch if msg.offset() == offset] if low <= offset < high else []
    finally:
        consumer.close()
    if not found:
        raise CheckpointRefusedError(f"{topic}[{partition}]@{offset}: no committed record there (the "
                              f"partition holds offsets {low}..{high - 1}); nothing written")
    msg = found[0]
    raw = msg.key() or b""
    record = DamagedRecord(topic, partition, offset, raw, "")
    if msg.value() is None:
        raise CheckpointRefusedError(f"{record.where} is a tombstone already; nothing written")
    try:
        key = raw.decode()
    except UnicodeDecodeError:
        key = None
    if key is not None and is_task_key(key):
        try:
            Checkpoint.from_bytes(msg.value() or b"")
            what = "a readable checkpoint"
        except CheckpointError:
            what = "an unreadable checkpoint"
        raise CheckpointRefusedError(
            f"{record.where} is {what} of task {key}: a tombstone would remove the task's "
            f"position altogether; write a valid one with `millpond checkpoint set "
            f"--partition {partition} --offset TOPIC=OFFSET` instead; nothing written")
    producer = TrackedProducer(job.producer_conf)
    producer.send(topic, partition, raw, None)
    producer.flush_and_check()
    return record


def group_active(job: Job) -> bool:
    """Whether the job's consumer group has live members (a process is running)."""
    desc = job.admin.describe_group(job.group_id)
    return bool(desc is not None and desc.members)


def reseed_from_local(job: Job, store: str | None = None) -> dict[str, int]:
    """Write every local entry back to an emptied changelog and re-point the checkpoints.

    For a changelog deleted or truncated while the job was down: the local stores are
    the only copy of the state, so they become the changelog's content again.
    Returns records written per store.
    """
    checkpoints = job.checkpoints()
    producer = TrackedProducer(job.producer_conf)
    written: dict[str, int] = {}
    updated: dict[int, Checkpoint] = {}
    stores = [cfg for cfg in job.stores(store)
              if cfg.changelog is not None and cfg.factory != "inmemory"]
    parts = job.partitions_of_inputs()
    # Every store directory is locked before anything is written.
    locks = lock_stores(job, [(cfg, p) for cfg in stores for p in parts], "restore --from-local")
    try:
        _reseed(job, stores, parts, checkpoints, producer, written, updated)
    finally:
        for lock in locks.values():
            lock.release()
    for ckpt in updated.values():
        producer.send(job.checkpoint_topic, ckpt.partition, ckpt.task.encode(), ckpt.to_bytes())
    producer.flush_and_check()
    return written


def _reseed(job: Job, stores: list[StoreConfig], parts: list[int],
            checkpoints: dict[str, Checkpoint], producer: TrackedProducer,
            written: dict[str, int], updated: dict[int, Checkpoint]) -> None:
    """:func:`reseed_from_local`'s writes, its store locks held."""
    from millpond.changelog.checkpoint import StoreOffset, write_offset_file
    from millpond.changelog.recovery import local_start

    def live_dir(cfg: StoreConfig, p: int) -> Path:
        return local.store_dir(job.config.job.logged_store_base_dir, job.config.job.name,
                               cfg.name, p)

    topics = {cfg.name: job.changelog(cfg, checkpoints) for cfg in stores}
    for cfg in stores:  # every store is usable before anything is written
        for p in parts:
            if local_start(live_dir(cfg, p), topics[cfg.name], p) is None:
                raise ChangelogRefusedError(f"no usable local state for {cfg.name} partition {p} "
                                     f"in {live_dir(cfg, p)}; nothing to re-seed from, "
                                     "nothing written")
    for cfg in stores:
        topic = topics[cfg.name]
        job.admin.ensure_compacted(topic, len(parts), cfg.changelog_replication_factor,
                                   cfg.changelog_topic_config)
        for p in parts:
            live = live_dir(cfg, p)
            engine = open_engine(cfg, live)
            try:
                n = 0
                with engine.all() as entries:
                    for key, value in entries:
                        producer.send(topic, p, key, value)
                        n += 1
                producer.flush_and_check()
                last = producer.last_offset(topic, p)
                offset = -1 if last is None else last
                written[cfg.name] = written.get(cfg.name, 0) + n
                tmp = live.with_name(live.name + ".reseed")
                local.wipe(tmp)
                engine.checkpoint(tmp)
                so = StoreOffset(cfg.name, topic, p, offset)
                write_offset_file(tmp, so)
                local.install_checkpoint(tmp, live)
                write_offset_file(live, so)
            finally:
                engine.close()
            ckpt = updated.get(p) or checkpoints.get(task_name(p)) or Checkpoint(task_name(p), p)
            ckpt.changelogs[cfg.name] = offset
            updated[p] = ckpt

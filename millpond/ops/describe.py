"""Looking at a stopped job's state: ``changelog describe`` and ``store get|range|dump``.

Reads take the same store lock as a running task, so they refuse a store a job has open.
With ``job.state.backup.uri`` set, each backed-up store partition's row also carries its
newest snapshot (:mod:`millpond.backup.status`, read from the bucket).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millpond.backup import StateBackups
from millpond.backup.status import BackupStatusReader, SnapshotStatus
from millpond.changelog import local
from millpond.changelog.checkpoint import read_offset_file, task_name
from millpond.changelog.errors import CheckpointError
from millpond.kafka.reading import read_range, watermarks
from millpond.ops.errors import NoLocalStateError
from millpond.ops.offline import Job
from millpond.serdes import serdes_for
from millpond.tasks.storage import open_engine


@dataclass
class PartitionInfo:
    """One row of ``changelog describe``."""

    store: str
    topic: str
    partition: int
    low: int
    high: int
    local_offset: int | None
    checkpointed: int | None
    lag: int | None = None  # changelog records after the local offset; None without one
    backup: SnapshotStatus | None = None  # newest snapshot; None when not backed up


def _backups(job: Job) -> BackupStatusReader | None:
    return BackupStatusReader(job.config) if job.config.backup is not None else None


def describe(job: Job, store: str | None = None) -> tuple[list[PartitionInfo], dict[str, dict[str, str]]]:
    """Per store partition: watermarks, the local OFFSET and the checkpointed offset."""
    rows: list[PartitionInfo] = []
    settings: dict[str, dict[str, str]] = {}
    checkpoints = job.checkpoints()
    backups = _backups(job)
    consumer = job.consumer()
    try:
        for cfg in job.stores(store):
            if cfg.changelog is None:
                continue
            topic = job.changelog(cfg, checkpoints)
            conf = job.admin.topic_config(topic)
            settings[topic] = {k: conf[k] for k in ("cleanup.policy", "min.compaction.lag.ms",
                                                    "segment.bytes", "retention.ms") if k in conf}
            for p in job.partitions(cfg):
                low, high = watermarks(consumer, topic, p)
                live = local.store_dir(job.config.job.logged_store_base_dir,
                                       job.config.job.name, cfg.name, p)
                so = read_offset_file_quiet(live)
                ckpt = checkpoints.get(task_name(p))
                checkpointed = ckpt.changelogs.get(cfg.name) if ckpt else None
                rows.append(PartitionInfo(
                    cfg.name, topic, p, int(low), int(high), so.offset if so else None,
                    checkpointed,
                    records_after(consumer, topic, p, so.offset, low, high) if so else None,
                    backups.status(cfg.name, p, checkpointed)
                    if backups is not None and StateBackups.covers(cfg) else None))
    finally:
        consumer.close()
    return rows, settings


def records_after(consumer: Any, topic: str, partition: int, offset: int, low: int,
                  high: int) -> int:
    """Committed records of ``topic[partition]`` after ``offset``: what a store at that offset
    has not applied. Counted by reading them, since offsets also number transaction markers
    (one after every commit) and aborted records, which are nobody's lag."""
    return sum(len(batch) for batch in read_range(consumer, topic, partition,
                                                  max(offset + 1, low), high))


def _require_base_dir(job: Job) -> None:
    """A base dir that does not exist is a wrong directory or key, never an empty store."""
    base = job.config.job.logged_store_base_dir
    if base.is_dir():
        return
    key = "job.logged.store.base.dir"
    relative = "" if base.is_absolute() else f" (relative to {Path.cwd()})"
    origin = (f"set at {job.config.location(key)}" if key in job.config.properties
              else f"the default: {job.config.location(key)} does not set it")
    raise NoLocalStateError(
        f"{key}={base}{relative} does not exist ({origin}): there is no local store to read "
        "here; run the command where the job keeps its state, or build it from the "
        "changelog with `millpond restore`")


def read_store(
    job: Job, store: str, partitions: list[int] | None = None, keys: list[str] | None = None,
    start: str | None = None, end: str | None = None, raw: bool = False,
) -> Iterator[tuple[int, Any, Any]]:
    """Yield (partition, key, value) of a stopped job's local store, decoded with its serdes
    (or as raw bytes with ``raw``)."""
    cfg = job.store(store)
    _require_base_dir(job)
    key_serde, msg_serde = serdes_for(job.config, cfg)
    if raw:
        from millpond.serdes.builtins import BytesSerde

        msg_serde = BytesSerde()
    parts = partitions if partitions is not None else job.partitions(cfg)
    for p in parts:
        live = local.store_dir(job.config.job.logged_store_base_dir, job.config.job.name,
                               cfg.name, p)
        if not live.exists():
            continue
        lock = local.StoreLock(live, job.config.job.state_permissions)
        lock.acquire()
        if read_offset_file_quiet(live) is None:
            warnings.warn(
                f"{live} holds writes after the last commit (the job stopped uncleanly); "
                "run `millpond restore` first to see the committed state", stacklevel=2)
        engine = open_engine(cfg, live)
        try:
            if keys is not None:
                for text in keys:
                    key = _parse_key(key_serde, text)
                    data = engine.get(key_serde.to_bytes(key))
                    yield p, key, None if data is None else msg_serde.from_bytes(data)
                continue
            if start is not None or end is not None:
                lo = key_serde.to_bytes(_parse_key(key_serde, start)) if start is not None else b""
                hi = key_serde.to_bytes(_parse_key(key_serde, end)) if end is not None else b"\xff" * 64
                it = engine.range(lo, hi)
            else:
                it = engine.all()
            with it:
                for k, v in it:
                    yield p, k if raw else key_serde.from_bytes(k), msg_serde.from_bytes(v)
        finally:
            engine.close()
            lock.release()


def read_offset_file_quiet(live: Any) -> Any:
    try:
        return read_offset_file(live)
    except CheckpointError:
        return None


def _parse_key(serde: Any, text: str) -> Any:
    """Turn a command-line key into the serde's type (numbers for integer/long serdes)."""
    name = getattr(serde, "name", "")
    if name in ("integer", "long"):
        return int(text)
    if name == "double":
        return float(text)
    if name == "bytes":
        return text.encode()
    if name == "json":
        import json

        try:
            return json.loads(text)
        except ValueError:
            return text
    return text

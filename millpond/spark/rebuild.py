"""Rebuild a store's state from its changelog with Spark: a Parquet snapshot, RocksDB dirs.

The state is the last value of every (partition, key) up to an end point per partition:
the changelog's end, or ``at_checkpoint`` the changelog offsets in the job's last
checkpoint (what a task restores to under effectively-once). Tombstones remove keys.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from millpond.spark.decode import decode, store_serdes, structure_values
from millpond.spark.errors import StateDirError
from millpond.spark.localdirs import DirWriter, partition_dirs
from millpond.spark.session import SparkSettings, get_spark
from millpond.spark.source import (
    ReadPlan,
    changelog_of,
    plan_to_checkpoint,
    plan_to_end,
    read_range,
    store_config,
)
from millpond.spark.spill import release, row_bytes, sorted_rows, spill
from millpond.spark.state import last_records, live_keys

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from millpond.config import Config

METADATA_FILE = "_millpond_rebuild.json"  # Spark readers skip files starting with "_"


@dataclass
class PartitionStats:
    """What the rebuild read and kept for one changelog partition."""

    start: int  # first offset read
    end: int  # end offset (exclusive)
    records: int = 0  # records read (compaction gaps and transaction markers excluded)
    keys: int = 0  # live keys after applying tombstones
    last_offset: int = -1  # the last offset the rebuilt state reflects (end - 1)


@dataclass
class RebuildResult:
    """Statistics of a rebuild; ``to_dict`` is its JSON report."""

    store: str
    topic: str
    mode: str  # "end" or "checkpoint"
    out: str | None
    records_read: int
    keys: int
    seconds: float
    partitions: dict[int, PartitionStats] = field(default_factory=dict)
    rocksdb_dirs: list[str] = field(default_factory=list)
    no_checkpoint: list[int] = field(default_factory=list)

    @property
    def records_per_second(self) -> float:
        return self.records_read / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["partitions"] = {str(p): asdict(s) for p, s in self.partitions.items()}
        doc["records_per_second"] = round(self.records_per_second, 1)
        doc["seconds"] = round(self.seconds, 3)
        return doc


def rebuild(
    config: Config,
    store: str,
    out: str | Path | None,
    at_checkpoint: bool = False,
    rocksdb_dirs: bool | str | Path = False,
    *,
    spark: SparkSession | None = None,
    settings: SparkSettings | None = None,
    spark_options: Mapping[str, str] | None = None,
) -> RebuildResult:
    """Rebuild ``store`` from its changelog.

    ``out``: directory for the Parquet snapshot (overwritten; None = no snapshot), columns
    store, partition, key, value, value_json, offset, timestamp, key_bytes, value_bytes.
    ``rocksdb_dirs``: True writes per-partition RocksDB store directories under the job's
    ``job.logged.store.base.dir``, a path writes them under that base directory instead;
    each gets an OFFSET file so a task adopts it and replays only later records. Under
    effectively-once a task restores to its checkpoint, so adoptable directories need
    ``at_checkpoint=True`` (a directory ahead of the checkpoint is discarded by the task).
    Returns statistics; ``seconds`` excludes Spark's start-up.
    """
    changelog = changelog_of(config, store, spark_options)
    cfg = store_config(config, store)
    serdes = store_serdes(config, store)
    plan = plan_to_checkpoint(config, changelog) if at_checkpoint else plan_to_end(changelog)
    writer = _dir_writer(config, store, plan, rocksdb_dirs) if rocksdb_dirs else None
    if out is None and writer is None:
        raise StateDirError("nothing to write: give an output directory or rocksdb_dirs")
    if writer is not None:
        writer.lock()  # fail before the heavy work if a task holds a store directory
    try:
        spark = spark or get_spark(settings)
        started = time.monotonic()
        result = _run(spark, plan, serdes, out, writer, cfg.name)
    finally:
        if writer is not None:
            writer.unlock()
    result.seconds = time.monotonic() - started
    if out is not None and "://" not in str(out):
        (Path(out) / METADATA_FILE).write_text(json.dumps(result.to_dict(), indent=2))
    return result


def _dir_writer(
    config: Config, store: str, plan: ReadPlan, rocksdb_dirs: bool | str | Path
) -> DirWriter:
    return dir_writer(config, store, plan.changelog.topic, plan.ranges, rocksdb_dirs)


def dir_writer(
    config: Config, store: str, topic: str, partitions: Iterable[int],
    rocksdb_dirs: bool | str | Path,
) -> DirWriter:
    """A writer of ``store``'s RocksDB directories for ``partitions``: under the job's
    ``job.logged.store.base.dir`` if ``rocksdb_dirs`` is True, else under that path."""
    from millpond.stores import RocksDbOptions

    cfg = store_config(config, store)
    if cfg.factory != "rocksdb":
        raise StateDirError(
            f"store {store!r} is {cfg.factory}: it has no local directory to rebuild "
            "(tasks restore in-memory stores from the changelog at start-up)"
        )
    base = config.job.logged_store_base_dir if rocksdb_dirs is True else Path(str(rocksdb_dirs))
    dirs = partition_dirs(base, config.job.name, store, partitions)
    options = RocksDbOptions.from_store_properties(cfg.properties)
    return DirWriter(store, topic, options, dirs, config.job.state_permissions)


def _run(
    spark: SparkSession,
    plan: ReadPlan,
    serdes: Any,
    out: str | Path | None,
    writer: DirWriter | None,
    store: str,
) -> RebuildResult:
    from pyspark.sql import functions as F

    last = spill(last_records(read_range(spark, plan)))
    try:
        per_partition = last.groupBy("partition").agg(
            F.sum("records").alias("records"),
            F.count_if(F.col("value_bytes").isNotNull()).alias("keys"),
            F.sum(F.when(F.col("value_bytes").isNotNull(), row_bytes("key_bytes", "value_bytes"))
                  ).alias("bytes"),
        ).collect()
        stats = {p: PartitionStats(s, e, last_offset=plan.last_offset(p))
                 for p, (s, e) in plan.ranges.items()}
        for row in per_partition:
            stats[row["partition"]].records = int(row["records"])
            stats[row["partition"]].keys = int(row["keys"])
        live = live_keys(last)
        if out is not None:
            decoded = spill(decode(live, serdes))
            try:
                structure_values(decoded, serdes).write.mode("overwrite").parquet(str(out))
            finally:
                release(decoded)
        dirs: list[str] = []
        if writer is not None:
            state_bytes = sum(int(row["bytes"] or 0) for row in per_partition)
            rows = sorted_rows(live, "partition", state_bytes)
            last_offsets = {p: plan.last_offset(p) for p in plan.ranges}
            writer.write(rows, last_offsets)
            dirs = [str(d) for _, d in sorted(writer.dirs.items())]
    finally:
        release(last)
    return RebuildResult(
        store=store,
        topic=plan.changelog.topic,
        mode=plan.mode,
        out=str(out) if out is not None else None,
        records_read=sum(s.records for s in stats.values()),
        keys=sum(s.keys for s in stats.values()),
        seconds=0.0,
        partitions=stats,
        rocksdb_dirs=dirs,
        no_checkpoint=list(plan.no_checkpoint),
    )

"""A Parquet snapshot of a store kept current by Structured Streaming over its changelog.

Layout of the output directory::

    out/versions/<batch id, 12 digits>/   one complete snapshot (Parquet) per applied batch,
                                          with a _MILLPOND_VERSION.json marker once complete
    out/CURRENT                           JSON naming the current version (atomically replaced)

Micro-batch ``N`` writes version ``N`` as a pure function of its base (the newest complete
version below ``N``) and batch ``N``'s records, then switches CURRENT to it. Spark's
checkpoint fixes each batch's offset range before the batch runs and re-runs an uncommitted
batch with the same range and id, so after a kill at any point the re-run rewrites version
``N`` from the same base: no changelog record is applied twice or skipped. Readers follow
CURRENT (:func:`current_version`, :func:`read_snapshot`); a few older versions are kept so
that a reader that just resolved CURRENT can finish.

Each batch rewrites the whole snapshot: pick the trigger interval accordingly.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from millpond.files import write_atomically
from millpond.spark.decode import (
    JSON_KIND,
    OUTPUT_COLUMNS,
    StoreSerdes,
    decode,
    store_serdes,
    structure_values,
)
from millpond.spark.errors import SnapshotError
from millpond.spark.session import SparkSettings, get_spark
from millpond.spark.source import changelog_of, read_stream
from millpond.spark.state import last_records, live_keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from millpond.config import Config

log = logging.getLogger(__name__)

VERSIONS = "versions"
CURRENT = "CURRENT"
MARKER = "_MILLPOND_VERSION.json"
_VERSION_NAME = re.compile(r"\d{12}")
MAX_RESTARTS = 5


@dataclass(frozen=True)
class Version:
    """A complete snapshot version: its batch id, directory and marker content."""

    batch_id: int
    path: Path
    as_of: dict[int, int]  # per partition: last changelog offset applied
    keys: int


@dataclass
class SnapshotResult:
    """What a snapshot run did (for available-now runs: everything up to the changelog end)."""

    store: str
    out: str
    batches: list[int] = field(default_factory=list)
    current: int | None = None
    as_of: dict[int, int] = field(default_factory=dict)
    keys: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "out": self.out, "batches": self.batches,
                "current": self.current, "as_of": {str(p): o for p, o in self.as_of.items()},
                "keys": self.keys, "seconds": round(self.seconds, 3)}


def version_dir(out: Path, batch_id: int) -> Path:
    return out / VERSIONS / f"{batch_id:012d}"


def complete_versions(out: Path) -> list[Version]:
    """Every complete version in ``out``, oldest first."""
    root = out / VERSIONS
    if not root.is_dir():
        return []
    found = []
    for entry in sorted(root.iterdir()):
        marker = entry / MARKER
        if _VERSION_NAME.fullmatch(entry.name) and marker.is_file():
            doc = json.loads(marker.read_text())
            found.append(Version(int(entry.name), entry,
                                 {int(p): int(o) for p, o in doc["as_of"].items()},
                                 int(doc["keys"])))
    return found


def current_version(out: str | Path) -> Version | None:
    """The version CURRENT names (None before the first batch)."""
    out = Path(out)
    try:
        doc = json.loads((out / CURRENT).read_text())
    except FileNotFoundError:
        return None
    batch_id = int(doc["batch_id"])
    path = version_dir(out, batch_id)
    marker = path / MARKER
    if not marker.is_file():
        raise SnapshotError(f"{out / CURRENT} names version {batch_id}, which is incomplete")
    meta = json.loads(marker.read_text())
    return Version(batch_id, path, {int(p): int(o) for p, o in meta["as_of"].items()},
                   int(meta["keys"]))


def read_snapshot(spark: SparkSession, out: str | Path) -> DataFrame:
    """The current snapshot as a DataFrame (SnapshotError if there is none yet)."""
    version = current_version(out)
    if version is None:
        raise SnapshotError(f"{out} has no snapshot yet (no {CURRENT} file)")
    return spark.read.parquet(str(version.path))


class BatchWriter:
    """The foreachBatch function: derives version N from its base and batch N."""

    def __init__(self, out: Path, serdes: StoreSerdes, keep_versions: int = 3) -> None:
        self.out = out
        self.serdes = serdes
        self.keep_versions = max(2, keep_versions)
        self.applied: list[int] = []

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        spark = batch.sparkSession
        started = time.monotonic()
        changes = last_records(batch).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            per_partition = changes.groupBy("partition").agg(
                F.max("offset"), F.sum("records")).collect()
            if not per_partition:
                return  # nothing to apply: the base stays current
            offsets = {int(r[0]): int(r[1]) for r in per_partition}
            records = sum(int(r[2]) for r in per_partition)
            base = self._base(batch_id)
            self._unpoint(batch_id, base)
            target = version_dir(self.out, batch_id)
            shutil.rmtree(target, ignore_errors=True)
            merged = self._merge(spark, base, changes).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                structure_values(merged, self.serdes).write.mode("overwrite").parquet(str(target))
                keys = merged.count()
            finally:
                merged.unpersist()
        finally:
            changes.unpersist()
        as_of = dict(base.as_of) if base else {}
        for p, o in offsets.items():
            as_of[p] = max(o, as_of.get(p, -1))
        marker = {"batch_id": batch_id, "base": base.batch_id if base else None,
                  "as_of": {str(p): o for p, o in sorted(as_of.items())}, "keys": keys,
                  "store": self.serdes.store}
        write_atomically(target / MARKER, json.dumps(marker))
        write_atomically(self.out / CURRENT, json.dumps({"batch_id": batch_id}))
        self.applied.append(batch_id)
        self._collect_garbage(batch_id)
        log.info("snapshot of %s: batch %d applied %d records onto version %s: %d keys in %.1fs",
                 self.serdes.store, batch_id, records, base.batch_id if base else None, keys,
                 time.monotonic() - started)

    def _base(self, batch_id: int) -> Version | None:
        older = [v for v in complete_versions(self.out) if v.batch_id < batch_id]
        return older[-1] if older else None

    def _unpoint(self, batch_id: int, base: Version | None) -> None:
        """Before rewriting version N, make sure CURRENT does not name it (re-run after a
        kill between the pointer switch and Spark's commit)."""
        try:
            doc = json.loads((self.out / CURRENT).read_text())
        except FileNotFoundError:
            return
        if int(doc["batch_id"]) >= batch_id:
            if base is None:
                (self.out / CURRENT).unlink()
            else:
                write_atomically(self.out / CURRENT, json.dumps({"batch_id": base.batch_id}))

    def _merge(self, spark: SparkSession, base: Version | None, changes: DataFrame) -> DataFrame:
        """Base rows whose key the batch did not touch, plus the batch's live keys, decoded."""
        from pyspark.sql import functions as F

        added = decode(live_keys(changes), self.serdes)
        if base is None:
            return added
        previous = spark.read.parquet(str(base.path))
        if self.serdes.value_kind == JSON_KIND:  # re-derive the struct from the JSON text
            previous = previous.withColumn("value", F.col("value_json"))
        touched = changes.select("partition", "key_bytes")
        kept = previous.join(touched, ["partition", "key_bytes"], "left_anti")
        return kept.select(*OUTPUT_COLUMNS).unionByName(added.select(*OUTPUT_COLUMNS))

    def _collect_garbage(self, batch_id: int) -> None:
        """Keep the newest ``keep_versions`` complete versions up to N; drop the rest (and
        versions above N, left by an earlier run with another checkpoint)."""
        root = self.out / VERSIONS
        complete = [v.batch_id for v in complete_versions(self.out) if v.batch_id <= batch_id]
        keep = set(complete[-self.keep_versions:])
        for entry in root.iterdir():
            if not _VERSION_NAME.fullmatch(entry.name):
                continue
            if int(entry.name) not in keep:
                shutil.rmtree(entry, ignore_errors=True)


def last_commit(checkpoint_location: str | Path) -> int | None:
    """The id of the last batch Spark's commit log marks as done (None if none)."""
    commits = Path(checkpoint_location) / "commits"
    ids = [int(f.name) for f in commits.iterdir() if f.name.isdigit()] if commits.is_dir() else []
    return max(ids, default=None)


def _is_spark_55271(exc: Exception) -> bool:
    """Spark 4.1.1's Kafka source fails progress reporting after re-running an uncommitted
    batch on restart (KafkaMicroBatchStream.metrics: Some(null).get.map). The batch itself
    completed and was committed first, so restarting the query is safe."""
    text = str(exc)
    return '"scala.Option.get()" is null' in text and "IterableOps.map" in text


def _start(
    spark: SparkSession, changelog: Any, writer: BatchWriter, checkpoint_location: str | Path,
    store: str, available_now: bool, interval: str, max_records_per_batch: int | None,
) -> Any:
    stream = read_stream(spark, changelog, max_records_per_batch)
    query_writer = (
        stream.writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint_location))
        .queryName(f"millpond-snapshot-{store}")
    )
    if available_now:
        query_writer = query_writer.trigger(availableNow=True)
    else:
        query_writer = query_writer.trigger(processingTime=interval)
    return query_writer.start()


def snapshot(
    config: Config,
    store: str,
    out: str | Path,
    checkpoint_location: str | Path,
    *,
    available_now: bool = True,
    interval: str = "10 seconds",
    max_records_per_batch: int | None = None,
    timeout: float | None = None,
    keep_versions: int = 3,
    spark: SparkSession | None = None,
    settings: SparkSettings | None = None,
    spark_options: Mapping[str, str] | None = None,
) -> SnapshotResult:
    """Maintain a Parquet snapshot of ``store`` in ``out`` (a local directory).

    ``available_now``: apply everything in the changelog now, then return; otherwise run
    micro-batches every ``interval`` until stopped (or ``timeout`` seconds, then stop).
    ``checkpoint_location`` is Spark's streaming checkpoint: keep it with ``out``.
    """
    if "://" in str(out):
        raise SnapshotError(f"{out}: the snapshot needs a local directory (atomic renames)")
    out = Path(out)
    (out / VERSIONS).mkdir(parents=True, exist_ok=True)
    changelog = changelog_of(config, store, spark_options)
    writer = BatchWriter(out, store_serdes(config, store), keep_versions)
    spark = spark or get_spark(settings)
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    restarts = 0
    while True:
        committed = last_commit(checkpoint_location)
        query = _start(spark, changelog, writer, checkpoint_location, store, available_now,
                       interval, max_records_per_batch)
        try:
            if deadline is None:
                query.awaitTermination()
            elif not query.awaitTermination(max(1, int(deadline - time.monotonic()))):
                query.stop()
            break
        except KeyboardInterrupt:
            query.stop()
            break
        except Exception as exc:  # StreamingQueryException: a batch or the trigger failed
            if (_is_spark_55271(exc) and last_commit(checkpoint_location) != committed
                    and restarts < MAX_RESTARTS):
                restarts += 1
                log.warning("snapshot of %s: restarting the query after Spark's Kafka metrics "
                            "bug (SPARK-55271); the re-run batch was committed", store)
                continue
            raise SnapshotError(f"snapshot of store {store!r} failed: {exc}") from exc
    current = current_version(out)
    return SnapshotResult(
        store=store,
        out=str(out),
        batches=writer.applied,
        current=current.batch_id if current else None,
        as_of=current.as_of if current else {},
        keys=current.keys if current else 0,
        seconds=time.monotonic() - started,
    )

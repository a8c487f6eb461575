"""Audit local store state against the changelog: which keys match, are missing, extra, differ.

The expected state is derived from the changelog (to its end, to the job's last checkpoint,
or to the offset each local directory's OFFSET file claims). The actual state is the local
RocksDB directories (opened read-only, so a running task may keep them) or a dump file of
JSON lines ``{"partition": 0, "key": "<base64>", "value": "<base64>"}``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from millpond.spark.decode import store_serdes, to_json
from millpond.spark.errors import SparkJobError, StateDirError
from millpond.spark.localdirs import partition_dirs, read_offset, read_store_dir
from millpond.spark.session import SparkSettings, get_spark
from millpond.spark.source import (
    ReadPlan,
    changelog_of,
    plan_to_checkpoint,
    plan_to_end,
    read_range,
    store_config,
)
from millpond.spark.spill import release, spill
from millpond.spark.state import last_records, live_keys

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from millpond.config import Config

STATUSES = ("matching", "missing", "extra", "differing")


@dataclass
class PartitionAudit:
    """Key counts of one partition; ``local_offset`` is its OFFSET file (None if absent)."""

    end: int  # changelog end offset compared against (exclusive)
    matching: int = 0
    missing: int = 0  # in the changelog state, not in the local store
    extra: int = 0  # in the local store, not in the changelog state
    differing: int = 0  # in both with different values
    local: str = "absent"  # "present" or "absent" (no directory)
    local_offset: int | None = None


@dataclass
class AuditReport:
    """The result of an audit; ``ok`` is False on any divergence. ``to_dict`` is its JSON."""

    store: str
    topic: str
    mode: str  # "end", "checkpoint" or "local-offsets"
    state: str
    seconds: float
    partitions: dict[int, PartitionAudit] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)

    def total(self, status: str) -> int:
        return sum(getattr(p, status) for p in self.partitions.values())

    @property
    def ok(self) -> bool:
        return all(self.total(s) == 0 for s in STATUSES[1:])

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store, "topic": self.topic, "mode": self.mode, "state": self.state,
            "ok": self.ok, "seconds": round(self.seconds, 3),
            "totals": {s: self.total(s) for s in STATUSES},
            "partitions": {str(p): asdict(a) for p, a in sorted(self.partitions.items())},
            "samples": self.samples,
        }


def audit(
    config: Config,
    store: str,
    state: str | Path | None = None,
    *,
    at_checkpoint: bool = False,
    at_local_offsets: bool = False,
    sample: int = 20,
    spark: SparkSession | None = None,
    settings: SparkSettings | None = None,
    spark_options: Mapping[str, str] | None = None,
) -> AuditReport:
    """Compare ``store``'s changelog-derived state with local state.

    ``state``: a base directory of store directories (default: the job's
    ``job.logged.store.base.dir``) or a JSON-lines dump file. ``at_checkpoint``: derive the
    expected state up to the last checkpoint; ``at_local_offsets``: up to each directory's
    OFFSET file (partitions without one: the changelog end). The directories must be
    readable where Spark's executors run (local master or a shared filesystem).
    """
    if at_checkpoint and at_local_offsets:
        raise SparkJobError("--at-checkpoint and --at-local-offsets exclude each other")
    changelog = changelog_of(config, store, spark_options)
    cfg = store_config(config, store)
    plan = plan_to_checkpoint(config, changelog) if at_checkpoint else plan_to_end(changelog)
    source = Path(state) if state is not None else config.job.logged_store_base_dir
    dump = source.is_file()
    dirs = {} if dump else partition_dirs(source, config.job.name, store, plan.ranges)
    parts = {p: PartitionAudit(end=e) for p, (_, e) in plan.ranges.items()}
    for p, live in dirs.items():
        parts[p].local = "present" if live.is_dir() else "absent"
        parts[p].local_offset = read_offset(live) if live.is_dir() else None
    mode = plan.mode
    if at_local_offsets:
        if dump:
            raise StateDirError("at_local_offsets needs store directories, not a dump file")
        plan = _plan_to_local_offsets(plan, parts)
        mode = "local-offsets"
        for p, (_, e) in plan.ranges.items():
            parts[p].end = e
    if cfg.factory != "rocksdb" and not dump:
        raise StateDirError(f"store {store!r} is {cfg.factory}: it has no local directories; "
                            "audit a dump file instead")

    spark = spark or get_spark(settings)
    started = time.monotonic()
    ttl = bool(cfg.properties.get("rocksdb.ttl.ms", "0").strip() not in ("", "0"))
    actual = _dump_state(spark, source) if dump else _dir_state(spark, dirs, ttl)
    report = AuditReport(store, changelog.topic, mode, str(source), 0.0, parts)
    _compare(spark, plan, actual, report, store_serdes(config, store), sample)
    report.seconds = time.monotonic() - started
    return report


def _plan_to_local_offsets(plan: ReadPlan, parts: dict[int, PartitionAudit]) -> ReadPlan:
    ranges = {}
    for p, (start, end) in plan.ranges.items():
        claimed = parts[p].local_offset
        if claimed is not None and claimed + 1 > end:
            raise StateDirError(
                f"{plan.changelog.topic}[{p}]: the local store claims offset {claimed} but the "
                f"changelog ends at {end}"
            )
        ranges[p] = (start, claimed + 1) if claimed is not None else (start, end)
    return ReadPlan(plan.changelog, ranges, "local-offsets", plan.no_checkpoint)


def _dir_state(spark: SparkSession, dirs: dict[int, Path], ttl: bool) -> DataFrame:
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    schema = StructType([
        StructField("partition", IntegerType(), False),
        StructField("key_bytes", BinaryType(), False),
        StructField("actual", BinaryType(), False),
    ])
    items = [(p, str(d)) for p, d in sorted(dirs.items())]

    def read(item: tuple[int, str]) -> Any:
        partition, path = item
        return ((partition, bytearray(k), bytearray(v)) for k, v in read_store_dir(path, ttl))

    rdd = spark.sparkContext.parallelize(items, max(1, len(items))).flatMap(read)
    return spark.createDataFrame(rdd, schema)


def _dump_state(spark: SparkSession, path: Path) -> DataFrame:
    from pyspark.sql import functions as F

    schema = "partition INT, key STRING, value STRING"
    raw = spark.read.schema(schema).option("mode", "FAILFAST").json(str(path))
    return raw.select(
        "partition",
        F.unbase64("key").alias("key_bytes"),
        F.unbase64("value").alias("actual"),
    )


def _compare(
    spark: SparkSession, plan: ReadPlan, actual: DataFrame, report: AuditReport,
    serdes: Any, sample: int,
) -> None:
    from pyspark.sql import functions as F

    expected = live_keys(last_records(read_range(spark, plan))).select(
        "partition", "key_bytes", F.col("value_bytes").alias("expected"), "offset"
    )
    joined = expected.join(actual, ["partition", "key_bytes"], "full_outer")
    status = (
        F.when(F.col("actual").isNull(), "missing")
        .when(F.col("expected").isNull(), "extra")
        .when(F.col("expected") == F.col("actual"), "matching")
        .otherwise("differing")
    )
    # Spilled to disk, not cached in the heap; a matching key keeps no values (only a
    # divergent one is shown), so the spilled copy is about the keys, not twice the state.
    divergent = F.col("status") != "matching"
    classified = spill(joined.withColumn("status", status).select(
        "partition", "key_bytes", "offset", "status",
        F.when(divergent, F.col("expected")).alias("expected"),
        F.when(divergent, F.col("actual")).alias("actual"),
    ))
    try:
        for row in classified.groupBy("partition", "status").count().collect():
            part = report.partitions.get(row["partition"])
            if part is None:  # a local directory or dump row for a partition the topic lacks
                part = report.partitions[row["partition"]] = PartitionAudit(end=0)
            setattr(part, row["status"], int(row["count"]))
        diffs = (
            classified.where(F.col("status") != "matching")
            .orderBy("partition", "key_bytes")
            .limit(sample)
            .collect()
        )
    finally:
        release(classified)
    report.samples = [_sample(row, serdes) for row in diffs]


def _sample(row: Any, serdes: Any) -> dict[str, Any]:
    """A divergent key, decoded with the store's serdes when possible (else base64)."""
    import base64

    from millpond.serdes import build_serde

    def show(data: bytes | None, spec: Any) -> Any:
        if data is None:
            return None
        try:
            obj = build_serde(spec).from_bytes(bytes(data))
            return obj if isinstance(obj, str | int | float) else to_json(obj)
        except Exception:
            return {"base64": base64.b64encode(bytes(data)).decode()}

    return {
        "partition": row["partition"],
        "status": row["status"],
        "key": show(row["key_bytes"], serdes.key_spec),
        "expected": show(row["expected"], serdes.msg_spec),
        "actual": show(row["actual"], serdes.msg_spec),
        "offset": row["offset"],
    }

"""Bootstrap a store from batch data with Spark: a new job starts from computed state.

Steps: check the job (stopped; never run unless ``replace``) -> read the source (Parquet,
JSON lines or CSV with a header) -> serialize key and value with the store's serdes and place
each key with the job's partitioner over the input partition count -> keep the last row of
each key in source order (files in name order, rows in file order), or refuse duplicates
(``unique``) -> create the changelog as a job would -> produce the records from Spark's
executors (each acknowledged; any delivery error fails the run) -> checkpoint every task at
the last offset written to its changelog partition -> optionally write RocksDB directories
that tasks adopt without replaying.

``replace`` (for a job that has run): the changelog's current live keys that are not in the
new data get tombstones, every new key gets its new value, so replaying the changelog ends
at exactly the new state while its offsets only grow. Existing checkpoints keep their input
offsets; their changelog offset moves to the end of what was written. A task whose local
store is at an older offset replays the tail (the tombstones and new values) and so ends
exact; without local state it restores from the changelog.

If a run fails after records were written but before the checkpoints, the changelog holds
records no checkpoint covers: run again with ``replace``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from millpond.changelog.checkpoint import NO_OFFSET
from millpond.spark.decode import store_serdes
from millpond.spark.encode import make_encoder, make_writer
from millpond.spark.errors import BootstrapError, SparkJobError
from millpond.spark.session import SparkSettings, get_spark
from millpond.spark.spill import release, row_bytes, sorted_rows, spill
from millpond.spark.target import Target, inspect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from millpond.config import Config

FORMATS = ("parquet", "json", "csv")
DUPLICATES_SHOWN = 5


@dataclass
class PartitionWrite:
    """What bootstrap wrote to one changelog partition."""

    keys: int = 0  # new values written
    tombstones: int = 0  # old keys removed (replace)
    checkpoint: int = NO_OFFSET  # the changelog offset the task's checkpoint now names


@dataclass
class BootstrapResult:
    """Statistics of a bootstrap; ``to_dict`` is its JSON report."""

    store: str
    topic: str
    source: str
    mode: str  # "new" or "replace"
    rows: int  # source rows read
    keys: int  # distinct keys written
    duplicates: int  # rows dropped because a later row had the same key
    records: int  # changelog records written (keys + tombstones)
    seconds: float
    partitions: dict[int, PartitionWrite] = field(default_factory=dict)
    rocksdb_dirs: list[str] = field(default_factory=list)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["partitions"] = {str(p): asdict(s) for p, s in sorted(self.partitions.items())}
        doc["records_per_second"] = round(self.records_per_second, 1)
        doc["seconds"] = round(self.seconds, 3)
        return doc


def bootstrap(
    config: Config,
    store: str,
    source: str | Path,
    fmt: str,
    key: str,
    values: Sequence[str],
    *,
    unique: bool = False,
    replace: bool = False,
    rocksdb_dirs: bool | str | Path = False,
    spark: SparkSession | None = None,
    settings: SparkSettings | None = None,
    spark_options: Mapping[str, str] | None = None,
    source_options: Mapping[str, str] | None = None,
) -> BootstrapResult:
    """Write ``store``'s state from the ``fmt`` file(s) at ``source``: column ``key`` as the
    key, ``values`` (one column: its value; several: a record of them) as the value.

    Refuses (:class:`BootstrapError`) while the job runs, when it has run unless
    ``replace``, and on duplicate keys with ``unique``. ``rocksdb_dirs`` as in
    :func:`millpond.spark.rebuild.rebuild`. ``seconds`` excludes Spark's start-up.
    """
    if fmt not in FORMATS:
        raise BootstrapError(f"unknown source format {fmt!r}; use one of {', '.join(FORMATS)}")
    if not values:
        raise BootstrapError("give at least one value column")
    serdes = store_serdes(config, store)
    target = inspect(config, store)
    target.refuse_unless(replace)
    writer = None
    if rocksdb_dirs:
        from millpond.spark.rebuild import dir_writer

        writer = dir_writer(config, store, target.topic, range(target.tasks), rocksdb_dirs)
        writer.lock()  # fail before the heavy work if a task holds a store directory
    try:
        spark = spark or get_spark(settings)
        started = time.monotonic()
        result = _run(spark, target, serdes, str(source), fmt, key, list(values), unique,
                      replace, writer, spark_options or {}, source_options or {})
        result.seconds = time.monotonic() - started
    finally:
        if writer is not None:
            writer.unlock()
    return result


def _run(spark: SparkSession, target: Target, serdes: Any, source: str, fmt: str, key: str,
         values: list[str], unique: bool, replace: bool, writer: Any,
         spark_options: Mapping[str, str], source_options: Mapping[str, str]) -> BootstrapResult:
    from pyspark.sql import functions as F

    rows = read_source(spark, source, fmt, key, values, source_options)
    encoded = encode(spark, rows, target, serdes, values)
    latest = encoded.groupBy("key_bytes").agg(
        F.max_by(F.struct("partition", "value_bytes"), "order").alias("last"),
        F.count(F.lit(1)).alias("rows"),
    ).select(F.col("last.partition").alias("partition"), "key_bytes",
             F.col("last.value_bytes").alias("value_bytes"), "rows")
    latest = spill(latest)
    try:
        counts = _spark_action(lambda: latest.agg(
            F.count(F.lit(1)).alias("keys"), F.sum("rows").alias("rows"),
            F.sum(row_bytes("key_bytes", "value_bytes")).alias("bytes")).collect()[0])
        keys, total = int(counts["keys"]), int(counts["rows"] or 0)
        if unique and total > keys:
            _refuse_duplicates(latest, serdes, total - keys)
        records = latest.select("partition", "key_bytes", "value_bytes")
        ends_before = target.ends()
        if replace and target.marks is not None:
            records = records.unionByName(_tombstones(spark, target, latest, spark_options))
        target.create_topics()
        written = _produce(records, target)
        offsets = {p: max(written[p][2] if p in written else NO_OFFSET, ends_before[p] - 1)
                   for p in range(target.tasks)}
        target.verify_covered(offsets)
        target.write_checkpoints(offsets)
        dirs: list[str] = []
        if writer is not None:
            live = sorted_rows(latest, "partition", int(counts["bytes"] or 0))
            writer.write(live, offsets)
            dirs = [str(d) for _, d in sorted(writer.dirs.items())]
    finally:
        release(latest)
    partitions = {p: PartitionWrite(written[p][0] - written[p][1] if p in written else 0,
                                    written[p][1] if p in written else 0, offsets[p])
                  for p in range(target.tasks)}
    return BootstrapResult(
        store=target.store.name, topic=target.topic, source=source,
        mode="replace" if replace else "new", rows=total, keys=keys, duplicates=total - keys,
        records=sum(w[0] for w in written.values()), seconds=0.0, partitions=partitions,
        rocksdb_dirs=dirs)


def read_source(spark: SparkSession, source: str, fmt: str, key: str, values: list[str],
                options: Mapping[str, str]) -> DataFrame:
    """The source's key and value columns plus ``order`` (file name, position in the file),
    which orders rows as they appear: files by name, rows within a file."""
    from pyspark.sql import functions as F

    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    reader = reader.options(**options)
    try:
        df = reader.load(source)
    except Exception as exc:
        raise BootstrapError(f"cannot read {fmt} source {source}: {_first_line(exc)}") from exc
    missing = [c for c in [key, *values] if c not in df.columns]
    if missing:
        raise BootstrapError(f"source {source} has no column(s) {', '.join(missing)} "
                             f"(columns: {', '.join(df.columns)})")
    # monotonically_increasing_id grows with the position within a file's splits, which
    # Spark keeps in file order; the file name orders the files.
    order = F.struct(F.input_file_name().alias("file"),
                     F.monotonically_increasing_id().alias("row"))
    return df.select(order.alias("order"), F.col(key).alias("key"),
                     *(F.col(v) for v in values))


def encode(spark: SparkSession, rows: DataFrame, target: Target, serdes: Any,
           values: list[str]) -> DataFrame:
    """Serialize every row: order, partition, key_bytes, value_bytes."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    fn = make_encoder(serdes.key_spec, serdes.msg_spec, values, target.tasks,
                      target.config.job.partitioner, target.store.name)

    def encode_rows(it: Any) -> Any:
        for row in it:
            partition, key_bytes, value_bytes = fn(row[1], row[2:])
            yield (row[0], partition, key_bytes, value_bytes)

    order = StructType([StructField("file", StringType()), StructField("row", LongType())])
    schema = StructType([StructField("order", order), StructField("partition", IntegerType()),
                         StructField("key_bytes", BinaryType()),
                         StructField("value_bytes", BinaryType())])
    return spark.createDataFrame(rows.rdd.mapPartitions(encode_rows), schema, verifySchema=False)


def _tombstones(spark: SparkSession, target: Target, latest: DataFrame,
                spark_options: Mapping[str, str]) -> DataFrame:
    """A tombstone for every key live in the changelog now and not in the new data."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    from millpond.spark.source import changelog_of, plan_to_end, read_range
    from millpond.spark.state import last_records, live_keys

    plan = plan_to_end(changelog_of(target.config, target.store.name, spark_options))
    old = live_keys(last_records(read_range(spark, plan))).select("partition", "key_bytes")
    gone = old.join(latest.select("partition", "key_bytes"), ["partition", "key_bytes"],
                    "left_anti")
    return gone.withColumn("value_bytes", F.lit(None).cast(BinaryType()))


def _produce(records: DataFrame, target: Target) -> dict[int, tuple[int, int, int]]:
    """Produce ``records`` from the executors, one Spark partition per changelog partition;
    partition -> (records, tombstones, last offset)."""
    conf = {**target.job.producer_conf, "acks": "all", "enable.idempotence": True,
            "linger.ms": 50}
    write = make_writer(conf, target.topic)
    spread = records.repartition(max(1, target.tasks), "partition")
    rows = _spark_action(lambda: spread.rdd.mapPartitions(write).collect())
    out: dict[int, tuple[int, int, int]] = {}
    for partition, n, tombstones, last in rows:
        if partition in out:  # a changelog partition is in one Spark partition only
            raise BootstrapError(f"changelog partition {partition} was written by two writers")
        out[partition] = (n, tombstones, last)
    return out


def _refuse_duplicates(latest: DataFrame, serdes: Any, dropped: int) -> None:
    from pyspark.sql import functions as F

    from millpond.serdes import build_serde

    key_serde = build_serde(serdes.key_spec)
    dups = latest.where(F.col("rows") > 1).orderBy(F.col("rows").desc(), "key_bytes")
    shown = []
    for row in dups.limit(DUPLICATES_SHOWN).collect():
        try:
            name = repr(key_serde.from_bytes(bytes(row["key_bytes"])))
        except Exception:
            name = repr(bytes(row["key_bytes"]))
        shown.append(f"{name} ({row['rows']} rows)")
    count = dups.count()
    raise BootstrapError(f"--unique: {count} key(s) appear in more than one row "
                         f"({dropped} extra rows), e.g. {', '.join(shown)}")


def _spark_action(action: Callable[[], Any]) -> Any:
    """Run a Spark action; a BootstrapError raised in a worker comes back as one."""
    try:
        return action()
    except SparkJobError:
        raise
    except Exception as exc:
        raise BootstrapError(_worker_error(exc)) from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _worker_error(exc: BaseException) -> str:
    """The message of the BootstrapError raised in a Spark worker, from Spark's wrapper."""
    text = str(exc)
    for line in reversed(text.splitlines()):
        if "BootstrapError:" in line:
            return line.split("BootstrapError:", 1)[1].strip()
    return f"the Spark job failed: {_first_line(exc)}"

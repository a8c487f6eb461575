"""Rescale a stopped, drained job from N to M tasks with Spark: move every key's state.

Steps: check the job (stopped, inputs grown to M partitions, drained: see
:mod:`millpond.spark.rescale_target`) -> per store, rebuild the state at the last
checkpoint from its current changelog -> place each key at ``partition_of(input key, M,
job.partitioner)``, the input key being the store key or ``key_fn(store key)`` -> refuse a
key that two old partitions hold (the store is not partitioned by that key) -> write the
state to a new changelog generation ``<topic>-gen<K+1>`` (M partitions, compacted) from
Spark's executors, each record acknowledged -> write M checkpoints in one transaction:
old partitions' inputs at their ends, new partitions at 0, each store at the last offset
written to its new partition, ``topics`` naming the new generation.

The old changelogs are kept (delete them once the rescaled job runs well). A failure before
the checkpoints leaves the job as it was, with a partial new generation that a second
rescale refuses until it is deleted. Local store directories of the old generation are
wiped by each task when it opens (their OFFSET files name the old topic).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from millpond.changelog.checkpoint import NO_OFFSET
from millpond.partitioner import partition_of
from millpond.spark.bootstrap import _first_line
from millpond.spark.decode import store_serdes
from millpond.spark.encode import make_writer
from millpond.spark.errors import RescaleError, SparkJobError
from millpond.spark.rescale_target import RescalePlan, StoreMove, inspect_rescale
from millpond.spark.session import SparkSettings, get_spark
from millpond.spark.spill import release, spill

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from millpond.config import Config, SerdeSpec

CONFLICTS_SHOWN = 5


@dataclass
class StoreRescale:
    """What the rescale moved for one store."""

    old_topic: str
    topic: str
    keys: int = 0
    partitions: dict[int, int] = field(default_factory=dict)  # new partition -> keys
    checkpoint: dict[int, int] = field(default_factory=dict)  # new partition -> offset


@dataclass
class RescaleResult:
    """Statistics of a rescale; ``to_dict`` is its JSON report."""

    job: str
    partitions_before: int
    partitions_after: int
    key_fn: str | None
    seconds: float
    stores: dict[str, StoreRescale] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        for s in doc["stores"].values():
            s["partitions"] = {str(p): n for p, n in sorted(s["partitions"].items())}
            s["checkpoint"] = {str(p): n for p, n in sorted(s["checkpoint"].items())}
        doc["seconds"] = round(self.seconds, 3)
        return doc


def load_key_fn(path: str) -> Callable[[Any], Any]:
    """The function named ``module:function``; RescaleError if it cannot be imported.

    The working directory is on the import path (as for ``task.class``), and the module is
    pickled by value, so Spark workers run the function without having the module."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise RescaleError(f"--key-fn {path!r}: expected module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        imported = importlib.import_module(module)
        fn = getattr(imported, name)
    except (ImportError, AttributeError) as exc:
        raise RescaleError(f"--key-fn {path!r}: cannot import it: {exc}") from exc
    if not callable(fn):
        raise RescaleError(f"--key-fn {path!r} is not callable")
    try:
        from pyspark import cloudpickle
    except ImportError:  # the plan alone needs no pyspark
        return fn
    cloudpickle.register_pickle_by_value(imported)
    return fn


def make_placer(key_spec: SerdeSpec, key_fn: str | None, partitions: int, partitioner: str,
                store: str) -> Callable[[bytes], int]:
    """A picklable function store key bytes -> new partition.

    Without ``key_fn`` the store key's bytes are the input key's (as the job's producers
    serialize it). With it, ``key_fn(store key)`` returns the input key: bytes as they
    are, a str as UTF-8, anything else serialized with the store's key serde."""
    built: list[Any] = []
    fn_loaded = load_key_fn(key_fn) if key_fn is not None else None

    def place(key_bytes: bytes) -> int:
        if key_fn is None:
            input_key = key_bytes
        else:
            if not built:
                from millpond.serdes import build_serde

                built.extend((build_serde(key_spec), fn_loaded))
            serde, fn = built
            try:
                mapped = fn(serde.from_bytes(key_bytes))
            except Exception as exc:
                raise RescaleError(f"store {store!r}: --key-fn {key_fn} failed on key "
                                   f"{key_bytes[:80]!r}: {exc}") from exc
            if isinstance(mapped, bytes | bytearray):
                input_key = bytes(mapped)
            elif isinstance(mapped, str):
                input_key = mapped.encode()
            else:
                try:
                    input_key = serde.to_bytes(mapped)
                except Exception as exc:
                    raise RescaleError(f"store {store!r}: --key-fn {key_fn} returned "
                                       f"{mapped!r} for key {key_bytes[:80]!r}, which the "
                                       f"store's key serde cannot serialize: {exc}") from exc
        try:
            return partition_of(input_key, partitions, partitioner)
        except ValueError as exc:
            raise RescaleError(f"store {store!r}: key {key_bytes[:80]!r}: {exc}") from exc

    return place


def rescale(
    config: Config,
    partitions: int,
    key_fn: str | None = None,
    *,
    spark: SparkSession | None = None,
    settings: SparkSettings | None = None,
    spark_options: Mapping[str, str] | None = None,
) -> RescaleResult:
    """Move every store of the stopped, drained job to ``partitions`` tasks (see module).

    Refuses (:class:`RescaleError`) before Spark starts when the job runs, is not drained,
    or its inputs do not have ``partitions`` partitions. ``seconds`` excludes Spark's
    start-up."""
    if key_fn is not None:
        load_key_fn(key_fn)  # a bad --key-fn fails now, not in a Spark worker
    plan = inspect_rescale(config, partitions)
    spark = spark or get_spark(settings)
    started = time.monotonic()
    result = RescaleResult(config.job.name, plan.before, plan.after, key_fn, 0.0,
                           skipped=list(plan.skipped))
    plan.create_topics()
    written: dict[str, dict[int, int]] = {}
    for move in plan.moves:
        stats = _move(spark, plan, move, key_fn, spark_options or {})
        written[move.store.name] = stats.checkpoint
        result.stores[move.store.name] = stats
    plan.commit(plan.new_checkpoints(written))
    result.seconds = time.monotonic() - started
    return result


def _move(spark: SparkSession, plan: RescalePlan, move: StoreMove, key_fn: str | None,
          spark_options: Mapping[str, str]) -> StoreRescale:
    """Rebuild ``move.store`` at the checkpoint, re-place its keys, write the new topic."""
    from millpond.spark.source import changelog_of, plan_to_checkpoint, read_range
    from millpond.spark.state import last_records, live_keys

    name = move.store.name
    changelog = changelog_of(plan.config, name, spark_options)
    if changelog.topic != move.old:  # both resolve through the checkpoints: cannot differ
        raise RescaleError(f"store {name!r}: changelog {changelog.topic} is not {move.old}")
    read = plan_to_checkpoint(plan.config, changelog)
    live = live_keys(last_records(read_range(spark, read)))
    placed = spill(_place(spark, live, plan, move, key_fn))
    try:
        _refuse_conflicts(placed, name, key_fn)
        out = StoreRescale(move.old, move.new)
        rows = _action(lambda: placed.select("new_partition", "key_bytes", "value_bytes")
                       .repartition(max(1, plan.after), "new_partition")
                       .rdd.mapPartitions(make_writer(_producer_conf(plan), move.new))
                       .collect())
    finally:
        release(placed)
    last: dict[int, int] = {}
    for partition, records, _tombstones, offset in rows:
        if partition in last:
            raise RescaleError(f"changelog partition {partition} was written by two writers")
        last[partition] = offset
        out.partitions[partition] = records
    plan.verify_written(move, last)
    out.keys = sum(out.partitions.values())
    out.checkpoint = {p: last.get(p, NO_OFFSET) for p in range(plan.after)}
    return out


def _producer_conf(plan: RescalePlan) -> dict[str, Any]:
    return {**plan.job.producer_conf, "acks": "all", "enable.idempotence": True,
            "linger.ms": 50}


def _place(spark: SparkSession, live: DataFrame, plan: RescalePlan, move: StoreMove,
           key_fn: str | None) -> DataFrame:
    """partition (old), new_partition, key_bytes, value_bytes of every live key."""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    serdes = store_serdes(plan.config, move.store.name)
    place = make_placer(serdes.key_spec, key_fn, plan.after, plan.config.job.partitioner,
                        move.store.name)

    def rows(it: Any) -> Any:
        for r in it:
            key = bytes(r[1])
            yield (r[0], place(key), key, bytes(r[2]))

    schema = StructType([StructField("partition", IntegerType()),
                         StructField("new_partition", IntegerType()),
                         StructField("key_bytes", BinaryType()),
                         StructField("value_bytes", BinaryType())])
    source = live.select("partition", "key_bytes", "value_bytes")
    return spark.createDataFrame(source.rdd.mapPartitions(rows), schema, verifySchema=False)


def _refuse_conflicts(placed: DataFrame, store: str, key_fn: str | None) -> None:
    """Two old partitions holding one key would collide in its new partition: one value
    would silently win. That means the store is not partitioned by the key used here."""
    from pyspark.sql import functions as F

    clash = placed.groupBy("new_partition", "key_bytes").agg(
        F.collect_set("partition").alias("old")).where(F.size("old") > 1)
    shown = _action(lambda: clash.limit(CONFLICTS_SHOWN).collect())
    if not shown:
        return
    count = _action(clash.count)
    examples = ", ".join(f"{bytes(r['key_bytes'])[:60]!r} in partitions {sorted(r['old'])}"
                         for r in shown)
    hint = ("check --key-fn" if key_fn else
            "give --key-fn module:function mapping a store key to its input key")
    raise RescaleError(f"store {store!r}: {count} key(s) live in more than one old partition "
                       f"(e.g. {examples}), so the store is not partitioned by the input key "
                       f"and moving them would drop values; {hint}")


def _action(action: Callable[[], Any]) -> Any:
    """Run a Spark action; a RescaleError (or BootstrapError) in a worker comes back as one."""
    try:
        return action()
    except SparkJobError:
        raise
    except Exception as exc:
        text = str(exc)
        for line in reversed(text.splitlines()):
            for marker in ("RescaleError:", "BootstrapError:"):
                if marker in line:
                    raise RescaleError(line.split(marker, 1)[1].strip()) from exc
        raise RescaleError(f"the Spark job failed: {_first_line(exc)}") from exc

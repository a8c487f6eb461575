"""``millpond spark ...``: rebuild, audit and snapshot store state from changelogs,
bootstrap it from batch data and rescale a job, with PySpark.

Mount with ``main.add_command(spark)``; also runs as ``python -m millpond.spark.cli``.
Exit codes: 0 success, 1 audit found divergence, 2 the job could not run.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from millpond.clibase import BoundaryGroup, MillpondFailure, RuntimeFailure


@dataclass(frozen=True)
class JobArgs:
    """What every spark command gets from the common options."""

    config: Any  # millpond.config.Config
    store: str
    settings: Any  # millpond.spark.session.SparkSettings
    kafka_options: dict[str, str]


def _common(fn: Callable[..., None]) -> Callable[..., None]:
    """Add the options every spark command takes; the command receives them as ``JobArgs``."""
    return _common_options(fn, with_store=True)


def _common_job(fn: Callable[..., None]) -> Callable[..., None]:
    """:func:`_common` for commands over the whole job (no --store; ``JobArgs.store`` empty)."""
    return _common_options(fn, with_store=False)


def _common_options(fn: Callable[..., None], with_store: bool) -> Callable[..., None]:
    @functools.wraps(fn)
    def command(config_path: Path, overrides: tuple[str, ...], master: str | None,
                driver_memory: str, shuffle_partitions: int, kafka_options: tuple[str, ...],
                spark_conf: tuple[str, ...], store: str = "", **kwargs: Any) -> None:
        from millpond.spark.session import SparkSettings, require_pyspark

        _run(require_pyspark)  # one line naming the extra, before any work
        settings = SparkSettings(master=master, driver_memory=driver_memory,
                                 shuffle_partitions=shuffle_partitions,
                                 conf=_pairs(spark_conf, "--spark-conf"))
        args = JobArgs(_load(config_path, overrides), store, settings,
                       _pairs(kafka_options, "--kafka-option"))
        _warn_secrets_on_argv(args.kafka_options)
        fn(args, **kwargs)

    options = [
        click.option("-c", "--config", "config_path", required=True,
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="The job's .properties file."),
        click.option("--config-override", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a config key (repeatable)."),
        click.option("--master", default=None,
                     help="Spark master URL (default: spark-submit's --master when launched "
                          "by spark-submit, else local[*])."),
        click.option("--driver-memory", default="1g", show_default=True),
        click.option("--shuffle-partitions", type=int, default=4, show_default=True),
        click.option("--kafka-option", "kafka_options", multiple=True, metavar="KEY=VALUE",
                     help="A Spark Kafka source option, over those made from the job's "
                          "settings, e.g. kafka.client.id=me (repeatable; secrets belong in "
                          "the properties file: a command line is readable by every user)."),
        click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
                     help="Extra Spark setting, e.g. spark.executor.memory=2g (repeatable)."),
    ]
    if with_store:
        options.insert(2, click.option("--store", required=True, help="The store to work on."))
    for option in reversed(options):
        command = option(command)
    return command


def _warn_secrets_on_argv(options: dict[str, str]) -> None:
    """A secret given as ``--kafka-option`` is on the command line, which every local user
    can read (``ps``): say so, and where it belongs."""
    from millpond.spark.kafka_options import looks_secret

    for key in filter(looks_secret, options):
        logging.getLogger("millpond.spark").warning(
            "--kafka-option %s puts a secret on this command line, where other local users "
            "can read it: write the job's settings in its properties file instead "
            "(systems.<system>.sasl.password=${NAME}, ...), which spark gives Spark's Kafka "
            "client itself", key)


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise MillpondFailure(f"bad {what} {item!r}: expected KEY=VALUE")
        result[key.strip()] = value
    return result


def _load(config_path: Path, overrides: Sequence[str]) -> Any:
    from millpond.streams.compile import load_config

    return load_config(config_path, overrides)


def _run(job: Callable[[], Any], progress: str | None = None, settings: Any = None) -> Any:
    """Run ``job`` (a ``MillpondError`` it raises becomes one line and its exit code at the
    group's boundary); with ``progress``, its Spark tasks are shown as that
    (millpond.spark.progress). Spark running out of memory becomes a ``SparkMemoryError``
    naming the option to raise (given the command's ``settings``)."""
    from millpond.errors import MillpondError

    try:
        if progress is None:
            return job()
        from millpond.spark.progress import spark_progress

        with spark_progress(progress):
            return job()
    except MillpondError:
        raise
    except Exception as exc:
        if settings is None:
            raise
        from millpond.spark.errors import SparkMemoryError
        from millpond.spark.oom import spark_memory_error

        why = spark_memory_error(exc, settings)
        if why is None:
            raise
        raise SparkMemoryError(why) from exc


def _emit(doc: dict[str, Any], report: Path | None) -> None:
    text = json.dumps(doc, indent=2, default=str)
    if report is not None:
        report.write_text(text + "\n")
    click.echo(text)


@click.group("spark", cls=BoundaryGroup)
def spark() -> None:
    """Rebuild, audit and snapshot store state from changelogs with PySpark."""
    logging.basicConfig(level=logging.INFO,  # no-op if the application configured logging
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # py4j's INFO lines are about its own connections ("Closing down clientserver connection").
    if logging.getLogger("py4j").level == logging.NOTSET:
        logging.getLogger("py4j").setLevel(logging.WARNING)
    # ... and py4j logs a lost JVM's tracebacks on the root logger (INFO and ERROR): the
    # command says why in one line instead (millpond.spark.oom), or raises what it got.
    logging.getLogger().addFilter(_not_from_py4j)


def _not_from_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


@spark.command("rebuild")
@_common
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Write a Parquet snapshot of the state here (replaced).")
@click.option("--at-checkpoint", is_flag=True,
              help="Stop at the changelog offsets of the job's last checkpoint.")
@click.option("--rocksdb-dirs", is_flag=True,
              help="Write per-partition RocksDB store directories (with OFFSET files) that "
                   "tasks adopt, under job.logged.store.base.dir.")
@click.option("--rocksdb-base-dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Write the store directories under this base dir instead.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the JSON statistics to this file.")
def rebuild_cmd(args: JobArgs, out: str | None, at_checkpoint: bool, rocksdb_dirs: bool,
                rocksdb_base_dir: Path | None, report: Path | None) -> None:
    """Rebuild a store's state from its changelog: Parquet and/or RocksDB directories."""
    from millpond.spark.rebuild import rebuild

    dirs: bool | Path = rocksdb_base_dir if rocksdb_base_dir is not None else rocksdb_dirs
    result = _run(lambda: rebuild(
        args.config, args.store, out, at_checkpoint=at_checkpoint, rocksdb_dirs=dirs,
        settings=args.settings, spark_options=args.kafka_options,
    ), progress=f"spark rebuild {args.store}", settings=args.settings)
    _emit(result.to_dict(), report)


@spark.command("audit")
@_common
@click.option("--state", type=click.Path(exists=True, path_type=Path), default=None,
              help="Base dir of the store directories (default job.logged.store.base.dir) or "
                   'a JSON-lines dump file ({"partition": N, "key": b64, "value": b64}).')
@click.option("--at-checkpoint", is_flag=True,
              help="Expected state: the changelog up to the job's last checkpoint.")
@click.option("--at-local-offsets", is_flag=True,
              help="Expected state: the changelog up to each directory's OFFSET file.")
@click.option("--sample", type=int, default=20, show_default=True,
              help="How many divergent keys to show.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the JSON report to this file.")
def audit_cmd(args: JobArgs, state: Path | None, at_checkpoint: bool, at_local_offsets: bool,
              sample: int, report: Path | None) -> None:
    """Compare local store state with the changelog; exit 1 on any divergence."""
    from millpond.spark.audit import audit

    result = _run(lambda: audit(
        args.config, args.store, state, at_checkpoint=at_checkpoint,
        at_local_offsets=at_local_offsets, sample=sample, settings=args.settings,
        spark_options=args.kafka_options,
    ), progress=f"spark audit {args.store}", settings=args.settings)
    _emit(result.to_dict(), report)
    if not result.ok:
        sys.exit(1)


@spark.command("snapshot")
@_common
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Snapshot directory (versions/ and CURRENT).")
@click.option("--checkpoint-location", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Spark's streaming checkpoint directory for this snapshot.")
@click.option("--available-now", is_flag=True,
              help="Apply everything in the changelog now, then exit.")
@click.option("--interval", default="10 seconds", show_default=True,
              help="Micro-batch interval when running continuously.")
@click.option("--max-records-per-batch", type=int, default=None,
              help="Cap on changelog records per micro-batch.")
@click.option("--timeout", type=float, default=None,
              help="Stop after this many seconds (continuous mode).")
def snapshot_cmd(args: JobArgs, out: Path, checkpoint_location: Path, available_now: bool,
                 interval: str, max_records_per_batch: int | None,
                 timeout: float | None) -> None:
    """Keep a Parquet snapshot current with Structured Streaming (exactly-once per batch)."""
    from millpond.spark.snapshot import snapshot

    result = _run(lambda: snapshot(
        args.config, args.store, out, checkpoint_location, available_now=available_now,
        interval=interval, max_records_per_batch=max_records_per_batch, timeout=timeout,
        settings=args.settings, spark_options=args.kafka_options,
    ), settings=args.settings)
    _emit(result.to_dict(), None)


@spark.command("bootstrap")
@_common
@click.option("--source", required=True, help="File or directory of the batch data.")
@click.option("--format", "fmt", required=True, type=click.Choice(["parquet", "json", "csv"]),
              help="The source's format (json: one object per line; csv: with a header).")
@click.option("--key", required=True, help="The column holding the store key.")
@click.option("--value", "values", required=True, multiple=True,
              help="The value column; repeat it to store a record of several columns.")
@click.option("--unique", is_flag=True,
              help="Refuse keys that appear in more than one row (default: the last wins).")
@click.option("--replace", is_flag=True,
              help="The job has run: make the store hold exactly the new state.")
@click.option("--rocksdb-dirs", is_flag=True,
              help="Also write the task store directories (with OFFSET files) under "
                   "job.logged.store.base.dir, so tasks need not replay.")
@click.option("--rocksdb-base-dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Write the store directories under this base dir instead.")
@click.option("--source-option", "source_options", multiple=True, metavar="KEY=VALUE",
              help="Extra Spark reader option, e.g. delimiter=; for CSV (repeatable).")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the JSON statistics to this file.")
def bootstrap_cmd(args: JobArgs, source: str, fmt: str, key: str, values: tuple[str, ...],
                  unique: bool, replace: bool, rocksdb_dirs: bool,
                  rocksdb_base_dir: Path | None, source_options: tuple[str, ...],
                  report: Path | None) -> None:
    """Write a store's state from batch data, with checkpoints, so the job starts from it."""
    from millpond.spark.bootstrap import bootstrap

    dirs: bool | Path = rocksdb_base_dir if rocksdb_base_dir is not None else rocksdb_dirs
    options = _pairs(source_options, "--source-option")
    result = _run(lambda: bootstrap(
        args.config, args.store, source, fmt, key, values, unique=unique, replace=replace,
        rocksdb_dirs=dirs, settings=args.settings, spark_options=args.kafka_options,
        source_options=options,
    ), progress=f"spark bootstrap {args.store}", settings=args.settings)
    _emit(result.to_dict(), report)


@spark.command("rescale")
@_common_job
@click.option("--partitions", required=True, type=click.IntRange(min=1),
              help="The new task count: the partition count the inputs have been given.")
@click.option("--key-fn", default=None, metavar="MODULE:FUNCTION",
              help="Maps a store key to the input key it belongs to (stores keyed like "
                   "hour|user); default: the store key is the input key.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the JSON statistics to this file.")
def rescale_cmd(args: JobArgs, partitions: int, key_fn: str | None,
                report: Path | None) -> None:
    """Move a stopped, drained job's state to more partitions (new changelog generations)."""
    from millpond.spark.rescale import rescale

    result = _run(lambda: rescale(args.config, partitions, key_fn, settings=args.settings,
                                  spark_options=args.kafka_options),
                  progress="spark rescale", settings=args.settings)
    _emit(result.to_dict(), report)


if __name__ == "__main__":
    spark()


@spark.command("submit-script")
def submit_script_cmd() -> None:
    """Print the path of the script to give spark-submit, which runs these same commands:

    spark-submit --master URL --packages CONNECTOR "$(millpond spark submit-script)" rebuild ...
    """
    # The script's path, found without importing it (it imports this module: no cycle).
    click.echo(Path(__file__).with_name("submit.py"))


@spark.command("jars")
def jars_cmd() -> None:
    """Print the Kafka connector's jars, comma-separated, for spark-submit --jars (resolved
    from Maven Central, or millpond's cache, by a short local Spark session the first time)."""
    from millpond.spark.session import SparkSettings, connector_jars, get_spark, stop_spark

    def resolve() -> str:
        jars = connector_jars()
        if jars is None:
            get_spark(SparkSettings(master="local[1]"))
            stop_spark()
            jars = connector_jars()
        if jars is None:
            raise RuntimeFailure("the Kafka connector's jars could not be resolved; use "
                                 "spark-submit --packages instead")
        return ",".join(jars)

    click.echo(_run(resolve))

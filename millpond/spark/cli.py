"""``millpond spark ...``: rebuild, audit and snapshot store state from changelogs with PySpark.

Mount with ``main.add_command(spark)``; also runs as ``python -m millpond.spark.cli``.
Exit codes: 0 success, 1 audit found divergence, 2 the job could not run.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click


class JobFailed(click.ClickException):
    """The job could not run (bad config, unreachable broker, Spark error): exit 2."""

    exit_code = 2


@dataclass(frozen=True)
class JobArgs:
    """What every spark command gets from the common options."""

    config: Any  # millpond.config.Config
    store: str
    settings: Any  # millpond.spark.session.SparkSettings
    kafka_options: dict[str, str]


def _common(fn: Callable[..., None]) -> Callable[..., None]:
    """Add the options every spark command takes; the command receives them as ``JobArgs``."""

    @functools.wraps(fn)
    def command(config_path: Path, overrides: tuple[str, ...], store: str, master: str,
                driver_memory: str, shuffle_partitions: int, kafka_options: tuple[str, ...],
                spark_conf: tuple[str, ...], **kwargs: Any) -> None:
        from millpond.spark.session import SparkSettings

        settings = SparkSettings(master=master, driver_memory=driver_memory,
                                 shuffle_partitions=shuffle_partitions,
                                 conf=_pairs(spark_conf, "--spark-conf"))
        args = JobArgs(_load(config_path, overrides), store, settings,
                       _pairs(kafka_options, "--kafka-option"))
        fn(args, **kwargs)

    options = [
        click.option("-c", "--config", "config_path", required=True,
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="The job's .properties file."),
        click.option("--config-override", "overrides", multiple=True, metavar="KEY=VALUE",
                     help="Override a config key (repeatable)."),
        click.option("--store", required=True, help="The store to work on."),
        click.option("--master", default="local[*]", show_default=True, help="Spark master URL."),
        click.option("--driver-memory", default="1g", show_default=True),
        click.option("--shuffle-partitions", type=int, default=4, show_default=True),
        click.option("--kafka-option", "kafka_options", multiple=True, metavar="KEY=VALUE",
                     help="Extra Spark Kafka source option, e.g. kafka.security.protocol=SSL."),
        click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
                     help="Extra Spark setting, e.g. spark.executor.memory=2g (repeatable)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise JobFailed(f"bad {what} {item!r}: expected KEY=VALUE")
        result[key.strip()] = value
    return result


def _load(config_path: Path, overrides: Sequence[str]) -> Any:
    from millpond.config import Config, ConfigError

    try:
        return Config.load(config_path, overrides)
    except ConfigError as exc:
        raise JobFailed(str(exc)) from exc


def _run(job: Callable[[], Any]) -> Any:
    """Run ``job``, turning the errors a user can fix into a message and exit code 2."""
    from millpond.config import ConfigError
    from millpond.serdes import SerdeError
    from millpond.spark.errors import SparkJobError

    try:
        return job()
    except (SparkJobError, ConfigError, SerdeError, ValueError) as exc:
        raise JobFailed(str(exc)) from exc


def _emit(doc: dict[str, Any], report: Path | None) -> None:
    text = json.dumps(doc, indent=2, default=str)
    if report is not None:
        report.write_text(text + "\n")
    click.echo(text)


@click.group("spark")
def spark() -> None:
    """Rebuild, audit and snapshot store state from changelogs with PySpark."""
    logging.basicConfig(level=logging.INFO,  # no-op if the application configured logging
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


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
    ))
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
    ))
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
    ))
    _emit(result.to_dict(), None)


if __name__ == "__main__":
    spark()

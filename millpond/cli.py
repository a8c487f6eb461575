"""The ``millpond`` command line: run jobs, restore and inspect stores, dev tooling."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from millpond import __version__


class _Main(click.Group):
    """The root group: user-facing errors become one clear line and exit 1, no traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except _user_errors() as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="millpond")
def main() -> None:
    """Samza-style stateful stream processing: RocksDB stores with Kafka changelogs."""
    import warnings

    from millpond.changelog.recovery import RecoveryWarning

    # Recovery problems are also logged; the warning is for library callers, not a 2nd line.
    warnings.filterwarnings("ignore", category=RecoveryWarning)


def _load_config(path: Path, overrides: tuple[str, ...]) -> Any:
    from millpond.config import Config, ConfigError

    try:
        return Config.load(path, overrides)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean bad config, input or state: shown as one clear line, no traceback."""
    from millpond.changelog.errors import ChangelogError
    from millpond.config import ConfigError
    from millpond.serdes.errors import SerdeError
    from millpond.stores.errors import StoreError
    from millpond.tasks.errors import TaskError

    return (ChangelogError, ConfigError, SerdeError, StoreError, TaskError)


config_option = click.option(
    "--config", "config_path", required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The job's .properties file.",
)
override_option = click.option(
    "--config-override", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Override one config key (repeatable).",
)


@main.command()
@config_option
@override_option
@click.option("--bounded", is_flag=True, help="Stop when every input partition reaches its end.")
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
def run(config_path: Path, overrides: tuple[str, ...], bounded: bool, log_level: str) -> None:
    """Run a job in the foreground until SIGTERM/SIGINT (or end of input with --bounded)."""
    import logging
    import os
    import signal

    # A signal during start-up (imports, config, topic checks) stops the job cleanly too;
    # a second one exits at once, as it does once the job runs.
    early: list[int] = []

    def during_start_up(signum: int, _frame: object) -> None:
        if early:
            os.write(2, b"second signal during start-up: exiting at once\n")
            os._exit(128 + signum)
        early.append(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, during_start_up)

    from millpond.tasks.container import Container

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = _load_config(config_path, overrides)
    container = Container(config, bounded=bounded or None)
    container.run(early_signals=early)


def _job(config_path: Path, overrides: tuple[str, ...]) -> Any:
    from millpond.tasks.offline import Job

    return Job(_load_config(config_path, overrides))


class _ProgressListener:
    """Shows a click progress bar per store partition while it restores."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.done = 0

    def on_restore_start(self, stats: Any) -> None:
        total = max(0, stats.end_offset - stats.start_offset)
        self.done = 0
        self.bar = click.progressbar(length=total or 1,
                                     label=f"{stats.store} {stats.topic}[{stats.partition}]",
                                     file=sys.stderr)
        self.bar.__enter__()

    def on_batch_restored(self, stats: Any) -> None:
        # Compaction leaves gaps, so progress is by records read against the offset range.
        self.bar.update(stats.records - self.done)
        self.done = stats.records

    def on_restore_end(self, stats: Any) -> None:
        self.bar.update(max(0, self.bar.length - self.bar.pos))
        self.bar.__exit__(None, None, None)


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@main.command()
@config_option
@override_option
@click.option("--store", default=None, help="Only this store (default: every logged store).")
@click.option("--partition", "partitions", type=int, multiple=True,
              help="Only this partition (repeatable; default: all).")
@click.option("--full", is_flag=True, help="Wipe local state first and replay the whole changelog.")
@click.option("--from-local", is_flag=True,
              help="The other way round: re-seed emptied changelogs from the local stores.")
def restore(config_path: Path, overrides: tuple[str, ...], store: str | None,
            partitions: tuple[int, ...], full: bool, from_local: bool) -> None:
    """Rebuild local stores from their changelogs (the job must be stopped)."""
    from millpond.changelog.errors import ChangelogError
    from millpond.tasks import offline

    job = _job(config_path, overrides)
    if from_local:
        if full or partitions:
            raise click.UsageError("--from-local re-seeds every partition; drop --full/--partition")
        try:
            written = offline.reseed_from_local(job, store)
        except ChangelogError as exc:
            raise _fail(exc) from exc
        for name, n in written.items():
            click.echo(f"re-seeded changelog of {name} with {n} records from local state")
        return
    try:
        results = offline.restore(job, store, list(partitions) or None, full, _ProgressListener())
    except ChangelogError as exc:
        raise _fail(exc) from exc
    click.echo(f"{'store':<20} {'part':>4} {'records':>10} {'bytes':>12} {'seconds':>8} "
               f"{'rec/s':>10} {'MB/s':>8}  mode")
    for r in results:
        click.echo(f"{r.store:<20} {r.partition:>4} {r.records:>10} {r.bytes:>12} "
                   f"{r.seconds:>8.2f} {r.records_per_s:>10.0f} {r.mb_per_s:>8.1f}  "
                   f"{'full' if r.full else 'tail'}")


@main.group()
def checkpoint() -> None:
    """Show or set a job's checkpoints (input and changelog offsets per task)."""


@checkpoint.command("show")
@config_option
@override_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
def checkpoint_show(config_path: Path, overrides: tuple[str, ...], fmt: str) -> None:
    """Print the latest checkpoint of every task."""
    import json

    checkpoints = _job(config_path, overrides).checkpoints()
    if fmt == "json":
        click.echo(json.dumps({k: json.loads(v.to_bytes()) for k, v in sorted(checkpoints.items())},
                              indent=2))
        return
    click.echo(f"{'task':<14} {'inputs (next offset)':<40} changelogs (last offset)")
    for name, c in sorted(checkpoints.items()):
        ins = ", ".join(f"{t}={o}" for t, o in sorted(c.inputs.items()))
        chs = ", ".join(f"{s}={o}" for s, o in sorted(c.changelogs.items()))
        click.echo(f"{name:<14} {ins:<40} {chs}")


@checkpoint.command("set")
@config_option
@override_option
@click.option("--partition", type=int, required=True, help="The task's partition.")
@click.option("--offset", "offsets", multiple=True, required=True, metavar="TOPIC=OFFSET",
              help="Next input offset to process (repeatable).")
def checkpoint_set(config_path: Path, overrides: tuple[str, ...], partition: int,
                   offsets: tuple[str, ...]) -> None:
    """Set a task's input offsets; refuses while any process of the job runs."""
    from millpond.changelog.errors import ChangelogError
    from millpond.tasks import offline

    inputs = {}
    for item in offsets:
        topic, sep, value = item.rpartition("=")
        if not sep or not value.lstrip("-").isdigit():
            raise click.BadParameter(f"{item!r} is not TOPIC=OFFSET", param_hint="--offset")
        inputs[topic] = int(value)
    try:
        ckpt = offline.set_checkpoint(_job(config_path, overrides), partition, inputs)
    except ChangelogError as exc:
        raise _fail(exc) from exc
    click.echo(ckpt.to_bytes().decode())


@main.group()
def changelog() -> None:
    """Inspect changelog topics."""


@changelog.command("describe")
@config_option
@override_option
@click.option("--store", default=None, help="Only this store.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
def changelog_describe(config_path: Path, overrides: tuple[str, ...], store: str | None,
                       fmt: str) -> None:
    """Per store partition: topic settings, low/high offsets, local offset and lag."""
    import dataclasses
    import json

    from millpond.tasks import describe

    rows, settings = describe.describe(_job(config_path, overrides), store)
    if fmt == "json":
        click.echo(json.dumps({"topics": settings,
                               "partitions": [dataclasses.asdict(r) for r in rows]}, indent=2))
        return
    for topic, conf in settings.items():
        click.echo(f"{topic}: " + ", ".join(f"{k}={v}" for k, v in sorted(conf.items())))
    click.echo(f"{'store':<16} {'part':>4} {'low':>10} {'high':>10} {'local':>10} "
               f"{'checkpointed':>12} {'lag':>8}")
    for r in rows:
        click.echo(f"{r.store:<16} {r.partition:>4} {r.low:>10} {r.high:>10} "
                   f"{'-' if r.local_offset is None else r.local_offset:>10} "
                   f"{'-' if r.checkpointed is None else r.checkpointed:>12} "
                   f"{'-' if r.lag is None else r.lag:>8}")


@main.group()
def store() -> None:
    """Read a stopped job's local stores, decoded with their serdes (JSON lines)."""


store_option = click.option("--store", "store_name", required=True, help="The store's name.")


def _emit(rows: Any, raw: bool = False) -> None:
    import base64
    import json

    for partition, key, value in rows:
        if raw:  # the format `millpond spark audit --state FILE` reads
            key, value = (base64.b64encode(x).decode() for x in (key, value))
        click.echo(json.dumps({"partition": partition, "key": key, "value": value},
                              default=repr, sort_keys=True))


@store.command("get")
@config_option
@override_option
@store_option
@click.option("--partition", type=int, required=True, help="The task's partition.")
@click.argument("keys", nargs=-1, required=True)
def store_get(config_path: Path, overrides: tuple[str, ...], store_name: str, partition: int,
              keys: tuple[str, ...]) -> None:
    """Print the values of KEYS (null when absent)."""
    from millpond.tasks import describe

    _emit(describe.read_store(_job(config_path, overrides), store_name, [partition], list(keys)))


@store.command("dump")
@config_option
@override_option
@store_option
@click.option("--partition", "partitions", type=int, multiple=True,
              help="Only this partition (repeatable; default: all).")
@click.option("--raw", is_flag=True,
              help="Base64 key and value bytes (the dump file `millpond spark audit` reads).")
def store_dump(config_path: Path, overrides: tuple[str, ...], store_name: str,
               partitions: tuple[int, ...], raw: bool) -> None:
    """Print every entry, in key order per partition."""
    from millpond.tasks import describe

    _emit(describe.read_store(_job(config_path, overrides), store_name,
                              list(partitions) or None, raw=raw), raw)


@store.command("range")
@config_option
@override_option
@store_option
@click.option("--partition", type=int, required=True, help="The task's partition.")
@click.option("--start", default=None, help="First key (inclusive).")
@click.option("--end", default=None, help="Last key (exclusive).")
def store_range(config_path: Path, overrides: tuple[str, ...], store_name: str, partition: int,
                start: str | None, end: str | None) -> None:
    """Print entries with START <= key < END (by serialized key order)."""
    from millpond.tasks import describe

    _emit(describe.read_store(_job(config_path, overrides), store_name, [partition],
                              start=start, end=end))


@main.group()
def dev() -> None:
    """Development tooling: a local Kafka broker without Docker."""


@dev.group()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Broker data directory (default: ~/.cache/millpond/kafka-<version>/data).",
)
@click.option("--port", type=int, default=None, help="Client port on 127.0.0.1 (default 9092).")
@click.pass_context
def kafka(ctx: click.Context, data_dir: Path | None, port: int | None) -> None:
    """A single-node Apache Kafka 4.x broker (KRaft) from Maven Central jars."""
    from millpond.dev.kafka import LocalKafka

    controller = port + 1 if port else None
    ctx.obj = LocalKafka(data_dir=data_dir, port=port, controller_port=controller)


@kafka.command("start")
@click.option("--timeout", type=float, default=90.0, show_default=True,
              help="Seconds to wait for the broker to answer.")
@click.pass_obj
def kafka_start(broker: object, timeout: float) -> None:
    """Start the broker (reusing a running one) and print its bootstrap address."""
    from millpond.dev.errors import DevError
    from millpond.dev.kafka import LocalKafka

    assert isinstance(broker, LocalKafka)
    try:
        bootstrap = broker.start(timeout=timeout, echo=lambda m: click.echo(m, err=True))
    except DevError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(bootstrap)


@kafka.command("stop")
@click.pass_obj
def kafka_stop(broker: object) -> None:
    """Stop the broker if it runs."""
    from millpond.dev.kafka import LocalKafka

    assert isinstance(broker, LocalKafka)
    click.echo("stopped" if broker.stop() else "not running")


@kafka.command("status")
@click.pass_obj
def kafka_status(broker: object) -> None:
    """Print the bootstrap address if the broker runs; exit 1 if it does not."""
    from millpond.dev.kafka import LocalKafka

    assert isinstance(broker, LocalKafka)
    status = broker.status()
    if status.running:
        click.echo(f"running pid={status.pid} bootstrap={status.bootstrap} data={status.data_dir}")
    else:
        click.echo(f"not running (bootstrap would be {status.bootstrap}, data={status.data_dir})")
        sys.exit(1)


def _mount_spark() -> None:
    """``millpond spark ...``: PySpark jobs over changelogs (pyspark is imported on use)."""
    from millpond.spark.cli import spark

    main.add_command(spark)


_mount_spark()

if __name__ == "__main__":
    main()

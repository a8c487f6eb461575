"""The ``millpond`` command line: run jobs, restore and inspect stores, dev tooling."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from millpond import __version__
from millpond.clibase import VERBOSE, BoundaryGroup, config_option, override_option

if TYPE_CHECKING:
    from millpond.dev import DevServer


@click.group(cls=BoundaryGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="millpond")
@click.option("-v", "--verbose", is_flag=True,
              help="On an error, print the full traceback before the one Error: line.")
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Samza-style stateful stream processing: RocksDB stores with Kafka changelogs.

    Exit codes: 0 done; 2 an error in the job's config, its code, its input or its
    environment (one Error: line; -v adds the traceback); 1 a runtime failure or a result a
    command reports (a difference an audit found, a server that is not running)."""
    import logging
    import warnings

    ctx.meta[VERBOSE] = verbose

    from millpond.changelog.recovery import RecoveryWarning

    # Recovery problems are also logged; the warning is for library callers, not a 2nd line.
    warnings.filterwarnings("ignore", category=RecoveryWarning)
    _show_config_warnings_as_lines()
    # Commands that configure no logging (all but run and spark) show warnings, a Kafka
    # client's included, as labelled lines on stderr rather than bare messages.
    last_resort = logging.StreamHandler()
    last_resort.setLevel(logging.WARNING)
    last_resort.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.lastResort = last_resort


def _show_config_warnings_as_lines() -> None:
    """A :class:`~millpond.config.ConfigWarning` (a likely typo, a key set twice) prints as
    one ``Warning: file:line: ...`` line, without the warnings module's source line."""
    import warnings

    from millpond.config import ConfigWarning

    plain = warnings.formatwarning

    def formatwarning(message: Warning | str, category: type[Warning], filename: str,
                      lineno: int, line: str | None = None) -> str:
        if issubclass(category, ConfigWarning):
            return f"Warning: {message}\n"
        return plain(message, category, filename, lineno, line)

    warnings.formatwarning = formatwarning


def _load_config(path: Path, overrides: tuple[str, ...]) -> Any:
    from millpond.streams.compile import load_config

    return load_config(path, overrides)


@main.command()
@config_option
@override_option
@click.option("--bounded", is_flag=True, help="Stop when every input partition reaches its end.")
@click.option("--log-level", default="INFO", show_default=True, help="Python logging level.")
@click.option("--wait-timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="How long to wait for Kafka at start before giving up (default: as long "
                   "as it takes, saying so every 30 s).")
@click.option("--no-check", "no_check", is_flag=True,
              help="Skip the check of the job's ACLs at start (see `millpond check`).")
def run(config_path: Path, overrides: tuple[str, ...], bounded: bool, log_level: str,
        wait_timeout: float | None, no_check: bool) -> None:
    """Run a job in the foreground until SIGTERM/SIGINT (or end of input with --bounded).

    Waits for Kafka if it is unreachable, then checks, writing nothing, that the job's
    principal holds every ACL the job needs (`millpond check`); a missing one stops it with
    exit 2 before anything runs."""
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

    from millpond.stores.malloc import private_arenas

    private_arenas()  # before `check` starts an admin client's threads (see the module)
    from millpond.tasks.container import Container
    from millpond.tasks.startup import StartupTimeline

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = _load_config(config_path, overrides)
    from millpond.ops.status import view_of

    container = Container(config, bounded=bounded or None, wait_timeout_s=wait_timeout,
                          job_status=view_of,  # the page's millpond status part
                          startup=StartupTimeline.of_process())
    if not no_check and not early:
        if container.job.admin.wait_reachable(wait_timeout, logging.getLogger(
                "millpond.container").warning, stopped=lambda: bool(early)):
            container.startup.mark("Kafka reachable")
            _check_at_start(container.job)
            container.startup.mark("ACL check")
    container.run(early_signals=early)


def _check_at_start(job: Any) -> None:
    """``millpond check`` for the job, before it runs: each missing ACL's line on stderr,
    then the error naming them all."""
    import logging
    import time

    from millpond.ops.check import UNCHECKED, preflight
    from millpond.ops.errors import CheckFailedError

    started = time.monotonic()
    try:
        findings = preflight(job)
    except CheckFailedError as exc:
        for line in exc.lines:
            click.echo(line, err=True)
        raise
    unchecked = sum(f.status == UNCHECKED for f in findings)
    logging.getLogger("millpond.check").info(
        "checked the job's %d ACLs in %.2f s: none missing%s", len(findings) - 1,
        time.monotonic() - started,
        f" ({unchecked} checked once the job has created its topics)" if unchecked else "")


def _job(config_path: Path, overrides: tuple[str, ...]) -> Any:
    from millpond.ops.offline import Job

    return Job(_load_config(config_path, overrides))




@main.command()
@config_option
@override_option
@click.option("--store", default=None, help="Only this store (default: every logged store).")
@click.option("--partition", "partitions", type=int, multiple=True,
              help="Only this partition (repeatable; default: all).")
@click.option("--full", is_flag=True, help="Wipe local state first and replay the whole changelog.")
@click.option("--from-local", is_flag=True,
              help="The other way round: re-seed emptied changelogs from the local stores.")
@click.option("--from-backup", is_flag=True,
              help="Wipe local state and start each store from its newest usable snapshot in "
                   "job.state.backup.uri, then replay the changelog tail.")
def restore(config_path: Path, overrides: tuple[str, ...], store: str | None,
            partitions: tuple[int, ...], full: bool, from_local: bool,
            from_backup: bool) -> None:
    """Rebuild local stores from their changelogs (the job must be stopped)."""
    from millpond.ops import offline
    from millpond.progress import RestoreProgress

    job = _job(config_path, overrides)
    if from_local:
        if full or partitions:
            raise click.UsageError("--from-local re-seeds every partition; drop --full/--partition")
        written = offline.reseed_from_local(job, store)
        for name, n in written.items():
            click.echo(f"re-seeded changelog of {name} with {n} records from local state")
        return
    results = offline.restore(job, store, list(partitions) or None, full,
                              RestoreProgress(), from_backup=from_backup)
    click.echo(f"{'store':<20} {'part':>4} {'records':>10} {'bytes':>12} {'seconds':>8} "
               f"{'rec/s':>10} {'MB/s':>8}  mode")
    for r in results:
        click.echo(f"{r.store:<20} {r.partition:>4} {r.records:>10} {r.bytes:>12} "
                   f"{r.seconds:>8.2f} {r.records_per_s:>10.0f} {r.mb_per_s:>8.1f}  "
                   f"{'full' if r.full else 'tail'}"
                   + (f" after snapshot {r.snapshot} ({r.downloaded} bytes downloaded in "
                      f"{r.download_seconds:.3f} s, {_rate(r.downloaded, r.download_seconds)})"
                      if r.snapshot else ""))


def _rate(size: int, seconds: float) -> str:
    """Bytes per second in the unit that shows it (a small snapshot is kB/s, not 0.0 MB/s)."""
    per_s = size / seconds if seconds > 0 else 0.0
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if per_s >= scale:
            return f"{per_s / scale:.1f} {unit}"
    return f"{per_s:.0f} B/s"


@main.group()
def app() -> None:
    """Inspect a dataflow app (app.class): its operators, stores and topics."""


@app.command("describe")
@config_option
@override_option
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid"]), default="text",
              show_default=True, help="An indented tree, or a Mermaid flowchart.")
def app_describe(config_path: Path, overrides: tuple[str, ...], fmt: str) -> None:
    """Print the app's sources, operators, stores (with their changelogs) and sinks."""
    from millpond.streams import describe
    from millpond.streams.compile import has_app, load_app
    from millpond.streams.errors import DataflowError

    config = _load_config(config_path, overrides)
    if not has_app(config):
        raise DataflowError(f"{config_path}: no app.class=<module>:<attribute>; this job is a "
                            "StreamTask job (task.class)")
    dataflow = load_app(config)
    click.echo((describe.mermaid if fmt == "mermaid" else describe.text)(dataflow, config),
               nl=False)


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

    checkpoints = _job(config_path, overrides).checkpoints(lenient=True)
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
              help="Next input offset to process (repeatable), within the partition's "
                   "[log start, log end].")
@click.option("--force", is_flag=True,
              help="Write an offset outside the partition's range, or a topic that is not "
                   "one of the job's inputs, anyway (each printed as forced).")
def checkpoint_set(config_path: Path, overrides: tuple[str, ...], partition: int,
                   offsets: tuple[str, ...], force: bool) -> None:
    """Set a task's input offsets; refuses while any process of the job runs.

    Refuses, writing nothing, a partition the job does not have, a negative offset, and,
    unless --force, a topic that is not one of the job's inputs or an offset outside the
    partition's [log start, log end]; each refusal names the valid range or topics."""
    from millpond.config.values import parse_int
    from millpond.ops import offline

    inputs = {}
    for item in offsets:
        topic, sep, value = item.rpartition("=")
        try:
            if not sep:
                raise ValueError("no '='")
            inputs[topic] = parse_int(value)
        except ValueError:
            raise click.BadParameter(f"{item!r} is not TOPIC=OFFSET", param_hint="--offset") from None
    ckpt, forced = offline.set_checkpoint(_job(config_path, overrides), partition, inputs,
                                          force)
    for line in forced:
        click.echo(f"Forced: {line}", err=True)
    click.echo(ckpt.to_bytes().decode())


@checkpoint.command("drop")
@config_option
@override_option
@click.option("--partition", type=int, required=True,
              help="The checkpoint topic's partition holding the record.")
@click.option("--offset", type=int, required=True, help="The record's offset.")
def checkpoint_drop(config_path: Path, overrides: tuple[str, ...], partition: int,
                    offset: int) -> None:
    """Remove a record of the checkpoint topic that is not a task's checkpoint (the one a
    warning names, e.g. random bytes): a tombstone with its raw key. Refuses a task's own
    record (readable or not: `checkpoint set` replaces it)."""
    from millpond.ops import offline

    record = offline.drop_record(_job(config_path, overrides), partition, offset)
    click.echo(f"wrote a tombstone for {record.where}")


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
    """Per store partition: topic settings, low/high offsets, local offset and lag, and
    the newest snapshot when job.state.backup.uri is set."""
    import dataclasses
    import json

    from millpond.ops import describe

    rows, settings = describe.describe(_job(config_path, overrides), store)
    if fmt == "json":
        click.echo(json.dumps({"topics": settings,
                               "partitions": [dataclasses.asdict(r) for r in rows]}, indent=2))
        return
    for topic, conf in settings.items():
        click.echo(f"{topic}: " + ", ".join(f"{k}={v}" for k, v in sorted(conf.items())))
    backups = any(r.backup is not None for r in rows)
    click.echo(f"{'store':<16} {'part':>4} {'low':>10} {'high':>10} {'local':>10} "
               f"{'checkpointed':>12} {'lag':>8}" + ("  backup" if backups else ""))
    for r in rows:
        click.echo(f"{r.store:<16} {r.partition:>4} {r.low:>10} {r.high:>10} "
                   f"{'-' if r.local_offset is None else r.local_offset:>10} "
                   f"{'-' if r.checkpointed is None else r.checkpointed:>12} "
                   f"{'-' if r.lag is None else r.lag:>8}"
                   + (f"  {r.backup.short() if r.backup else '-'}" if backups else ""))


@main.command()
@config_option
@override_option
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format (json: one object per task partition).")
@click.option("--explain-memory", is_flag=True,
              help="Print how job.container.memory.mb is divided in each process (each part, "
                   "its bytes, the keys that changed it) and exit; Kafka is not asked.")
def status(config_path: Path, overrides: tuple[str, ...], fmt: str,
           explain_memory: bool) -> None:
    """Where a job stands, from Kafka alone (running or not), per task partition.

    Shows the owning process (group member's client id and host), the input offsets the task
    resumes from (its checkpoint), end offsets and lag, the last checkpoint's time and
    changelog offsets, each changelog's end, and, when the job's state directory is on this
    machine, whether each local store is clean, dirty or absent; with job.state.backup.uri,
    each store's newest snapshot (or why the bucket could not be read). Exits 1 if the job
    never ran. With --explain-memory: the process's memory plan instead.
    """
    import dataclasses
    import json

    from millpond.ops import status as job_status

    if explain_memory:
        memory = _load_config(config_path, overrides).memory
        if fmt == "json":
            click.echo(json.dumps({"budget": memory.budget, "source": memory.source,
                                   "parts": [dataclasses.asdict(p) for p in memory.parts()]},
                                  indent=2))
        else:
            click.echo(memory.render())
        return
    group, rows = job_status.status(_job(config_path, overrides))
    if fmt == "json":
        click.echo(json.dumps(job_status.to_json(group, rows), indent=2))
        return
    for line in job_status.format_table(group, rows):
        click.echo(line)


@main.group()
def topics() -> None:
    """Create a job's topics."""


@topics.command("create")
@config_option
@override_option
@click.option("--partitions", type=click.IntRange(min=1), required=True,
              help="Partitions of each topic created (one task per input partition).")
@click.option("--output", "outputs", multiple=True, metavar="TOPIC",
              help="Also create this output topic (repeatable; `kafka.` prefix optional).")
@click.option("--replication-factor", type=click.IntRange(min=1), default=None,
              help="Replication of each topic created [default: min(3, brokers)].")
def topics_create(config_path: Path, overrides: tuple[str, ...], partitions: int,
                  outputs: tuple[str, ...], replication_factor: int | None) -> None:
    """Create the job's input topics (task.inputs) and each --output, if missing.

    Idempotent: an existing topic is left alone and reported (with a warning if its
    partition count differs). Exits 0 when every topic exists afterwards, 2 if one
    could not be created.
    """
    from millpond.ops import topics as job_topics

    job = _job(config_path, overrides)
    names = job_topics.job_topics(job.config, list(outputs))
    for r in job_topics.create_topics(job.admin, names, partitions, replication_factor):
        click.echo(r.describe(), err=r.mismatch)


@main.command()
@config_option
@override_option
@click.option("--principal", default="User:<principal>", show_default=True,
              help="The principal to grant to, e.g. User:alice.")
@click.option("--role", "roles", multiple=True,
              type=click.Choice(["job", "cli", "operator", "spark"]),
              help="Only this role (repeatable): the job (millpond run), the read-only "
                   "commands (status, checkpoint show, changelog describe), the operator's "
                   "commands that write (restore, checkpoint set, topics create), the spark "
                   "commands [default: all].")
@click.option("--output", "outputs", multiple=True, metavar="TOPIC",
              help="An output topic the job's task sends to (repeatable; not in the config).")
@click.option("--format", "fmt", type=click.Choice(["kafka-acls", "json"]), default="kafka-acls",
              show_default=True, help="kafka-acls.sh command lines, or one JSON object.")
def acls(config_path: Path, overrides: tuple[str, ...], principal: str, roles: tuple[str, ...],
         outputs: tuple[str, ...], fmt: str) -> None:
    """Print the Kafka ACLs the job needs, from its config alone (no broker is asked)."""
    import json

    from millpond.ops.acls import ROLES, required_acls

    config = _load_config(config_path, overrides)
    chosen = roles or ROLES
    found = {role: required_acls(config, role, outputs) for role in chosen}
    if fmt == "json":
        click.echo(json.dumps({role: [a.to_json() for a in found[role]] for role in chosen},
                              indent=2))
        return
    bootstrap = config.bootstrap_servers("kafka")
    for role in chosen:
        click.echo(f"# {role}: {ROLE_HELP[role]}")
        for acl in found[role]:
            click.echo(f"kafka-acls.sh --bootstrap-server {bootstrap} --command-config "
                       f"admin.properties {acl.kafka_acls(principal)}  # {acl.why}")


@main.command()
@config_option
@override_option
@click.option("--role", type=click.Choice(["job", "cli", "operator", "spark"]), default="job",
              show_default=True, help="Whose ACLs to check (see `millpond acls`).")
@click.option("--output", "outputs", multiple=True, metavar="TOPIC",
              help="An output topic the job's task sends to (repeatable; not in the config).")
def check(config_path: Path, overrides: tuple[str, ...], role: str,
          outputs: tuple[str, ...]) -> None:
    """Connect with the job's settings and check, one line each, every ACL the role needs,
    writing nothing. Exits 0 only if the connection works and nothing is MISSING."""
    from millpond.ops.check import MISSING, principal
    from millpond.ops.check import check as run_check

    job = _job(config_path, overrides)
    findings = run_check(job, role, outputs)
    for finding in findings:
        click.echo(finding.line(principal(job)))
    missing = sum(f.status == MISSING for f in findings)
    if missing:
        click.echo(f"{missing} missing: the job cannot do its work as this principal", err=True)
        sys.exit(1)


ROLE_HELP = {
    "job": "millpond run (and a restart after a crash)",
    "cli": "millpond status, checkpoint show, changelog describe",
    "operator": "millpond restore, checkpoint set, topics create",
    "spark": "millpond spark rebuild, audit, snapshot, bootstrap, rescale",
}


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
    from millpond.ops import describe

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
    from millpond.ops import describe

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
    from millpond.ops import describe

    _emit(describe.read_store(_job(config_path, overrides), store_name, [partition],
                              start=start, end=end))


ServerOptions = tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...]


def _server_commands(group: click.Group, what: str, prints: str, timeout: float,
                     options: ServerOptions = ()) -> None:
    """Add ``start``, ``stop`` and ``status`` to a dev server's group. Its ``ctx.obj`` makes
    the :class:`millpond.dev.DevServer`, given the values of ``options`` (click options
    each of the three commands takes, e.g. ``--secure``)."""

    def with_options(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    @group.command("start")
    @click.option("--timeout", type=float, default=timeout, show_default=True,
                  help=f"Seconds to wait for the {what} to be ready.")
    @with_options
    @click.pass_obj
    def start(make: Callable[..., DevServer], timeout: float, **flags: Any) -> None:
        from millpond.dev import SecuredServer

        server = make(**flags)
        address = server.start(timeout=timeout, echo=lambda m: click.echo(m, err=True))
        click.echo(server.connection_help() if isinstance(server, SecuredServer) else address)

    start.help = f"Start the {what} (reusing a running one) and {prints}."

    @group.command("stop")
    @with_options
    @click.pass_obj
    def stop(make: Callable[..., DevServer], **flags: Any) -> None:
        click.echo("stopped" if make(**flags).stop() else "not running")

    stop.help = f"Stop the {what} if it runs."

    @group.command("status")
    @with_options
    @click.pass_obj
    def status(make: Callable[..., DevServer], **flags: Any) -> None:
        running, line = make(**flags).status_line()
        click.echo(line)
        if not running:
            sys.exit(1)

    status.help = f"Print where the {what} runs; exit 1 if it does not."


@main.group()
def dev() -> None:
    """Development tooling: a local Kafka broker, S3 server and Spark cluster, without
    Docker."""


@dev.group()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Broker data directory (default: ~/.cache/millpond/kafka-<version>/data, "
         "secure-data with --secure).",
)
@click.option("--port", type=int, default=None,
              help="Client port on 127.0.0.1 (default 9092, 9094 with --secure); the "
                   "controller's is the next one.")
@click.option("--gc", type=click.Choice(["g1", "zgc"]), default="g1", show_default=True,
              help="The broker JVM's garbage collector when it starts: g1 (Kafka's default) "
                   "or zgc (sub-millisecond pauses; what `make bench` uses, see the "
                   "benchmarks page). A running broker is reused as it is.")
@click.pass_context
def kafka(ctx: click.Context, data_dir: Path | None, port: int | None, gc: str) -> None:
    """A single-node Apache Kafka 4.x broker (KRaft) from Maven Central jars: plaintext, or
    with --secure SASL_SSL with SCRAM users and ACLs enforced."""
    ctx.obj = functools.partial(_kafka_broker, data_dir, port, gc)


def _kafka_broker(data_dir: Path | None, port: int | None, gc: str, secure: bool) -> DevServer:
    from millpond.dev.kafka import LocalKafka
    from millpond.dev.secure_kafka import SecureLocalKafka

    kind = SecureLocalKafka if secure else LocalKafka
    return kind(data_dir=data_dir, port=port, controller_port=port + 1 if port else None, gc=gc)


_SECURE = click.option(
    "--secure", is_flag=True,
    help="The secured broker (SASL_SSL with SCRAM users, a dev CA, ACLs enforced), on its "
         "own port and data dir.")
_server_commands(kafka, "broker", "print its bootstrap address (with --secure: the client "
                 "settings as properties lines, and the 0600 file with the admin's "
                 "credentials)", 90.0, options=(_SECURE,))


@dev.group("s3")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Buckets and state (default: ~/.cache/millpond/s3proxy-<version>/data).")
@click.option("--port", type=int, default=None, help="Port on 127.0.0.1 (default 9000).")
@click.pass_context
def s3_dev(ctx: click.Context, data_dir: Path | None, port: int | None) -> None:
    """An S3 API server (S3Proxy from Maven Central, filesystem backend) on 127.0.0.1."""
    from millpond.dev.s3 import LocalS3

    ctx.obj = functools.partial(LocalS3, data_dir=data_dir, port=port)


_server_commands(s3_dev, "server", "print its endpoint", 60.0)


@dev.group("spark")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Cluster state and logs (default: ~/.cache/millpond/spark-cluster).")
@click.option("--workers", type=int, default=2, show_default=True, help="Worker JVMs.")
@click.option("--worker-memory", default="1g", show_default=True,
              help="Memory each worker offers its executors.")
@click.option("--port", type=int, default=None, help="Master port on 127.0.0.1 (default 7077).")
@click.pass_context
def spark_dev(ctx: click.Context, data_dir: Path | None, workers: int, worker_memory: str,
              port: int | None) -> None:
    """A Spark standalone cluster (a master and workers, each its own JVM) from the jars
    the pyspark package ships, on 127.0.0.1."""
    from millpond.dev.spark import LocalSparkCluster

    ctx.obj = functools.partial(LocalSparkCluster, data_dir=data_dir, workers=workers,
                                port=port, worker_memory=worker_memory)


_server_commands(spark_dev, "cluster", "print its master URL", 120.0)


class LazyCommands(dict[str, click.Command]):
    """A group's commands, some named by ``"module:attribute"`` and imported on first use.

    ``millpond run`` never looks up ``spark`` or ``backup``, so it does not import them (the
    spark package's modules and their imports were 0.3-0.9 s of every run's start-up); a
    listing (``--help``, the docs' mkdocs-click) asks for the values and imports them all."""

    def __init__(self, commands: Mapping[str, click.Command], lazy: dict[str, str]) -> None:
        super().__init__(commands)
        self._lazy = dict(lazy)

    def _load(self, name: str) -> click.Command:
        import importlib

        module, attribute = self._lazy.pop(name).split(":")
        command: click.Command = getattr(importlib.import_module(module), attribute)
        super().__setitem__(name, command)
        return command

    def _load_all(self) -> None:
        for name in list(self._lazy):
            self._load(name)

    def __getitem__(self, name: str) -> click.Command:
        return self._load(name) if name in self._lazy else super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        return self._load(name) if name in self._lazy else super().get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._lazy or super().__contains__(name)

    def __iter__(self) -> Any:
        return iter([*super().keys(), *self._lazy])

    def __len__(self) -> int:
        return super().__len__() + len(self._lazy)

    def keys(self) -> Any:
        return [*super().keys(), *self._lazy]

    def values(self) -> Any:
        self._load_all()
        return super().values()

    def items(self) -> Any:
        self._load_all()
        return super().items()


# ``millpond spark ...`` (PySpark jobs over changelogs), ``millpond backup ...`` (state
# snapshots in job.state.backup.uri) and ``millpond query ...`` (a running job's endpoint),
# imported when named.
main.commands = LazyCommands(main.commands, {
    "spark": "millpond.spark.cli:spark",
    "backup": "millpond.backup.cli:backup",
    "query": "millpond.query.cli:query",
})

if __name__ == "__main__":
    main()

"""The ``millpond`` command line: run jobs, restore and inspect stores, dev tooling."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from millpond import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="millpond")
def main() -> None:
    """Samza-style stateful stream processing: RocksDB stores with Kafka changelogs."""


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


if __name__ == "__main__":
    main()

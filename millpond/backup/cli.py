"""``millpond backup list|verify``: the snapshots of a job's store partitions."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from millpond.backup.errors import BackupUnavailableError
from millpond.backup.location import BackupLocation
from millpond.clibase import config_option, override_option
from millpond.errors import MillpondError


def _location(config_path: Path, overrides: tuple[str, ...]) -> tuple[BackupLocation, list[str]]:
    from millpond.streams.compile import load_config

    config = load_config(config_path, overrides)
    location = BackupLocation.from_config(config)
    return location, [c.name for c in config.stores.values() if c.backup_enabled]


def _partitions(location: BackupLocation, store: str) -> list[int]:
    root = f"{location.root}/{store}"
    names = [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in location._ls(root)]
    return sorted(int(n.split("-", 1)[1]) for n in names if n.startswith("partition-"))


@contextmanager
def _reading(location: BackupLocation) -> Iterator[None]:
    """Turn a failure to read the backup location (an endpoint nothing listens on, refused
    credentials, a network error: whatever s3fs/botocore or another fsspec filesystem
    raises) into one line naming the URI, instead of a traceback."""
    try:
        yield
    except (click.ClickException, MillpondError):
        raise
    except Exception as exc:
        raise BackupUnavailableError(
            f"cannot read the backup URI {location.uri}: {type(exc).__name__}: {exc}") from exc




@click.group()
def backup() -> None:
    """List and verify state snapshots in job.state.backup.uri."""


@backup.command("list")
@config_option
@override_option
def backup_list(config_path: Path, overrides: tuple[str, ...]) -> None:
    """Snapshots per store partition: id, changelog offset, time, bytes, files."""
    location, stores = _location(config_path, overrides)
    with _reading(location):
        rows = [(store, p, m) for store in stores for p in _partitions(location, store)
                for m in location.manifests(store, p)]
    click.echo(f"{'store':<16} {'part':>4} {'snapshot':<34} {'offset':>10} "
               f"{'created (UTC)':<20} {'bytes':>12} {'files':>5}")
    for store, p, m in rows:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m.created_ms / 1000))
        click.echo(f"{store:<16} {p:>4} {m.id:<34} {m.offset:>10} {created:<20} "
                   f"{m.size:>12} {len(m.files):>5}")


@backup.command("verify")
@config_option
@override_option
def backup_verify(config_path: Path, overrides: tuple[str, ...]) -> None:
    """Read every file of every snapshot and check sizes and SHA-256; exit 1 if any is bad."""
    location, stores = _location(config_path, overrides)
    bad = 0
    with _reading(location):
        for store in stores:
            for p in _partitions(location, store):
                for m in location.manifests(store, p):
                    problems = location.verify(m)
                    bad += bool(problems)
                    state = "ok" if not problems else "BAD: " + "; ".join(problems)
                    click.echo(f"{store} partition {p} snapshot {m.id} (offset {m.offset}): "
                               f"{state}")
    if bad:
        click.echo(f"{bad} bad snapshot(s)", err=True)
        sys.exit(1)

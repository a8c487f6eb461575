"""``millpond query get|range|prefix``: read a running job's stores through its endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from millpond.clibase import config_option, override_option
from millpond.query.client import QueryClient, group_endpoints, own_endpoint

MAX_LIMIT = 10_000  # the endpoint's own bound on a page


@click.group()
@config_option
@override_option
@click.option("--endpoint", "endpoints", multiple=True, metavar="URL",
              help="A process's endpoint (http://host:port), tried before any other "
                   "(repeatable); without it, the endpoints the job's running processes "
                   "publish, then job.query.address.")
@click.option("--committed", is_flag=True,
              help="What the tasks' last commits hold, not what they processed since.")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Ask this partition only (default: wherever the keys are).")
@click.pass_context
def query(ctx: click.Context, config_path: Path, overrides: tuple[str, ...],
          endpoints: tuple[str, ...], committed: bool, partition: int | None) -> None:
    """Read a running job's stores (its job.query.address endpoint); one JSON object a line.

    Any process of the job answers any key; the token (job.query.token) is sent if the
    config has one. Exits 2 for a request the endpoint refuses (unknown store, bad key,
    wrong token), 1 when no endpoint answers or none can now (the job starting, stopping,
    restoring: retry)."""
    ctx.obj = (config_path, overrides, list(endpoints), committed, partition)


def _client(ctx: click.Context) -> tuple[QueryClient, list[tuple[str, str]], int | None]:
    """The client for the group's options, the parameters every request carries and the
    partition asked."""
    from millpond.streams.compile import load_config

    config_path, overrides, endpoints, committed, partition = ctx.obj
    config = load_config(config_path, overrides)
    urls = list(endpoints)
    if not urls:
        from millpond.job import Job

        job = Job(config)
        urls = group_endpoints(lambda: job.admin.describe_group(job.group_id))
        own = own_endpoint(config.job.query_address)
        if own is not None and own not in urls:
            urls.append(own)
    params = [("committed", "1")] if committed else []
    return QueryClient(urls, config.job.query_token), params, partition


def _echo(objects: Iterable[Any]) -> None:
    for obj in objects:
        click.echo(json.dumps(obj, ensure_ascii=False))


@query.command("get")
@click.argument("store")
@click.argument("keys", nargs=-1, required=True)
@click.pass_context
def query_get(ctx: click.Context, store: str, keys: tuple[str, ...]) -> None:
    """Each KEY's value: {"key", "value"} for a key the store holds, {"key", "found": false}
    for one it does not (keys in the store's key serde's text form)."""
    client, params, partition = _client(ctx)
    for start in range(0, len(keys), 1000):  # the endpoint takes 1,000 keys a request
        chunk = [("key", k) for k in keys[start:start + 1000]]
        got = client.get(client.path(store, "get-many", partition, chunk + params))
        _echo(got["entries"])
        _echo({"key": key, "found": False} for key in got["missing"])


_scan_options = [
    click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=100, show_default=True,
                 help="Entries per page."),
    click.option("--all", "every", is_flag=True,
                 help="Follow the continuation tokens: every entry, page after page."),
    click.option("--next", "after", default=None, metavar="TOKEN",
                 help="Resume where a page ended (its {\"next\": ...} line)."),
]


def _scan(ctx: click.Context, store: str, op: str, bounds: list[tuple[str, str]], limit: int,
          every: bool, after: str | None) -> None:
    """Print the scan's entries; a last {"next": token} line if entries remain unprinted."""
    client, params, partition = _client(ctx)
    page: dict[str, Any] = {}
    for page in client.pages(store, op, partition, [*bounds, ("limit", str(limit)), *params],
                             every, after):
        _echo(page["entries"])
    if page.get("next") is not None:
        _echo([{"next": page["next"]}])


@query.command("range")
@click.argument("store")
@click.option("--from", "start", default=None, metavar="KEY", help="First key (inclusive).")
@click.option("--to", "end", default=None, metavar="KEY", help="End key (exclusive).")
@_scan_options[0]
@_scan_options[1]
@_scan_options[2]
@click.pass_context
def query_range(ctx: click.Context, store: str, start: str | None, end: str | None,
                limit: int, every: bool, after: str | None) -> None:
    """Entries with --from <= key < --to (either may be left out), in key order."""
    bounds = [(name, value) for name, value in (("from", start), ("to", end))
              if value is not None]
    _scan(ctx, store, "range", bounds, limit, every, after)


@query.command("prefix")
@click.argument("store")
@click.argument("prefix")
@_scan_options[0]
@_scan_options[1]
@_scan_options[2]
@click.pass_context
def query_prefix(ctx: click.Context, store: str, prefix: str, limit: int, every: bool,
                 after: str | None) -> None:
    """Entries whose serialized key starts with PREFIX's, in key order."""
    _scan(ctx, store, "prefix", [("prefix", prefix)], limit, every, after)

"""The ``job.state.backup.*`` settings: where state snapshots go and how often.

``job.state.backup.uri`` turns backups on (any fsspec URL: ``s3://bucket/prefix``,
``file:///mnt/shared/prefix``); ``job.state.backup.options.<name>`` are passed to the
fsspec filesystem, a dotted name nesting (``options.client_kwargs.endpoint_url`` becomes
``{"client_kwargs": {"endpoint_url": ...}}``), ``true``/``false`` becoming booleans and
numbers (``60``, ``2.5``) ints and floats, except the credentials (``key``, ``secret``,
``token``, ``password``), which stay text. The backup location merges them into its own
defaults key by key (:func:`millpond.config.values.deep_merge`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from millpond.config.properties import Properties
from millpond.config.schema import int_default
from millpond.config.values import error, get_int, parse_scalar, with_prefix

URI = "job.state.backup.uri"
INTERVAL = "job.state.backup.interval.ms"
RETAIN = "job.state.backup.retain"
OPTIONS = "job.state.backup.options."
DEFAULT_INTERVAL_MS = int_default(INTERVAL)  # from millpond.config.schema, which documents it
DEFAULT_RETAIN = int_default(RETAIN)
# Options kept as text even when they look like numbers (a secret of digits is still a string).
TEXT_OPTIONS = frozenset({"key", "secret", "token", "password"})


@dataclass(frozen=True)
class BackupConfig:
    """Where and how often each store partition's snapshot is uploaded."""

    uri: str
    interval_ms: int = DEFAULT_INTERVAL_MS
    retain: int = DEFAULT_RETAIN
    options: dict[str, Any] = field(default_factory=dict)


def parse_backup(props: Properties) -> BackupConfig | None:
    """The backup settings; None when ``job.state.backup.uri`` is unset or blank."""
    uri = props.get(URI, "").strip()
    if not uri:
        for key in (INTERVAL, RETAIN):
            if key in props:
                raise error(props, key, f"has no effect without {URI}")
        return None
    if "://" not in uri and not uri.startswith("/"):
        raise error(props, URI, f"expected a URL such as s3://bucket/prefix or "
                                f"file:///path, got {uri!r}")
    options: dict[str, Any] = {}
    for name, value in sorted(with_prefix(props, OPTIONS).items()):  # "a" before "a.b"
        parts = name.split(".")
        if not all(parts):
            raise error(props, OPTIONS + name, "empty option name part")
        node = options
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise error(props, OPTIONS + name, f"{part!r} is already a plain option")
            node = child
        node[parts[-1]] = (value.strip() if parts[-1] in TEXT_OPTIONS
                           else parse_scalar(value))
    return BackupConfig(
        uri=uri,
        interval_ms=get_int(props, INTERVAL, DEFAULT_INTERVAL_MS, minimum=0),
        retain=get_int(props, RETAIN, DEFAULT_RETAIN, minimum=1),
        options=options,
    )

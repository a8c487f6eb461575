"""The ``job.*`` and ``task.*`` settings, with Samza's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from millpond.config.properties import Properties
from millpond.config.schema import bool_default, int_default, key, str_default
from millpond.config.values import (
    StreamRef,
    describe,
    error,
    get_bool,
    get_choice,
    get_int,
    get_mode,
    get_stream,
    missing,
    parse_stream,
)
from millpond.partitioner import ALIASES, DEFAULT_PARTITIONER, PARTITIONERS, canonical

# Defaults and choices come from the schema (millpond.config.schema), which documents them.
PROCESSING_GUARANTEES = key("task.processing.guarantee").choices
DEFAULT_SYSTEM = str_default("job.changelog.system")
DEFAULT_ID = str_default("job.id")
DEFAULT_WINDOW_MS = int_default("task.window.ms")
DEFAULT_COMMIT_MS = int_default("task.commit.ms")
# task.commit.ms when unset under exactly-once (Kafka Streams' default there): outputs read
# read_committed become visible at commits, so 60 s would mean a 30 s median latency.
EXACTLY_ONCE_COMMIT_MS = 100
DEFAULT_TIMEOUT_MS = int_default("task.timeout.ms")
DEFAULT_QUERY_LINGER_MS = int_default("job.query.linger.ms")
DEFAULT_GUARANTEE = str_default("task.processing.guarantee")
DEFAULT_BASE_DIR = str_default("job.logged.store.base.dir")
STATE_PERMISSIONS = "job.state.permissions"
DEFAULT_STATE_PERMISSIONS = int(str_default(STATE_PERMISSIONS), 8)
DEFAULT_DROP_DESERIALIZATION_ERRORS = bool_default("task.drop.deserialization.errors")


@dataclass(frozen=True)
class JobConfig:
    """What to run and how: inputs, timers, guarantees, where local state lives."""

    name: str
    id: str = DEFAULT_ID
    task_class: str | None = None
    inputs: list[StreamRef] = field(default_factory=list)
    window_ms: int = DEFAULT_WINDOW_MS  # -1: window() is never called
    commit_ms: int = DEFAULT_COMMIT_MS
    timeout_ms: int = DEFAULT_TIMEOUT_MS  # how long Kafka may be unreachable while running
    processing_guarantee: str = DEFAULT_GUARANTEE
    logged_store_base_dir: Path = Path(DEFAULT_BASE_DIR)
    # mode of the state's directories (files: the same without x), job.state.permissions
    state_permissions: int = DEFAULT_STATE_PERMISSIONS
    changelog_system: str = DEFAULT_SYSTEM
    drop_deserialization_errors: bool = DEFAULT_DROP_DESERIALIZATION_ERRORS
    dlq_stream: StreamRef | None = None
    partitioner: str = DEFAULT_PARTITIONER  # key -> input partition, see millpond.partitioner
    query_address: tuple[str, int] | None = None  # job.query.address: (host, port), or off
    query_token: str | None = None  # job.query.token: the endpoint's bearer token, or none
    query_linger_ms: int = DEFAULT_QUERY_LINGER_MS  # job.query.linger.ms


def parse_job(props: Properties) -> JobConfig:
    """Read the job settings; ``job.name`` (or Samza's ``app.name``) is required, and a
    high-level application (``app.class`` without ``task.class``) is refused."""
    _refuse_high_level_app(props)
    name_key = "job.name" if "job.name" in props or "app.name" not in props else "app.name"
    name = props.get(name_key, "").strip()
    if not name:
        raise missing(props, "job.name", "every job needs a name (its consumer group is "
                      "<job.name>-<job.id>)", "job.name=page-view-counter")
    id_key = "job.id" if "job.id" in props or "app.id" not in props else "app.id"
    inputs = [
        parse_stream(props, "task.inputs", item, DEFAULT_SYSTEM)
        for item in props.get("task.inputs", "").split(",")
        if item.strip()
    ]
    base_dir = props.get("job.logged.store.base.dir", "").strip()
    guarantee = get_choice(props, "task.processing.guarantee", DEFAULT_GUARANTEE,
                           PROCESSING_GUARANTEES)
    return JobConfig(
        name=name,
        id=props.get(id_key, DEFAULT_ID).strip() or DEFAULT_ID,
        task_class=props.get("task.class", "").strip() or None,
        inputs=inputs,
        window_ms=_int(props, "task.window.ms"),
        commit_ms=_commit_ms(props, guarantee),
        timeout_ms=_int(props, "task.timeout.ms"),
        processing_guarantee=guarantee,
        logged_store_base_dir=Path(base_dir or DEFAULT_BASE_DIR),
        state_permissions=get_mode(props, STATE_PERMISSIONS, DEFAULT_STATE_PERMISSIONS),
        changelog_system=props.get("job.changelog.system", "").strip() or DEFAULT_SYSTEM,
        drop_deserialization_errors=get_bool(props, "task.drop.deserialization.errors",
                                             DEFAULT_DROP_DESERIALIZATION_ERRORS),
        dlq_stream=get_stream(props, "task.dlq.stream", DEFAULT_SYSTEM),
        partitioner=_partitioner(props),
        query_address=_address(props, "job.query.address"),
        query_token=props.get("job.query.token", "").strip() or None,
        query_linger_ms=_int(props, "job.query.linger.ms"),
    )


def _address(props: Properties, name: str) -> tuple[str, int] | None:
    """``host:port`` (an IPv6 host in brackets) of key ``name``; None when unset or empty."""
    text = props.get(name, "").strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise error(props, name, f"{text!r} is not host:port (e.g. 127.0.0.1:9405; port 0 "
                                 "picks a free one)")
    return host, int(port)


def _commit_ms(props: Properties, guarantee: str) -> int:
    """task.commit.ms; unset (or blank) under exactly-once, EXACTLY_ONCE_COMMIT_MS."""
    if guarantee == "exactly-once" and not props.get("task.commit.ms", "").strip():
        return EXACTLY_ONCE_COMMIT_MS
    return _int(props, "task.commit.ms")


def _int(props: Properties, name: str) -> int:
    """An int key with the default and range the schema documents (file:line when outside)."""
    entry = key(name)
    return get_int(props, name, int_default(name), entry.minimum, entry.maximum)


PRODUCER_PARTITIONER = f"systems.{DEFAULT_SYSTEM}.producer.partitioner"


def _partitioner(props: Properties) -> str:
    """``job.partitioner`` (default murmur2, Kafka's Java default). A librdkafka
    ``producer.partitioner`` set alone decides it when it names one of the same functions;
    set both, they must agree."""
    names = [*PARTITIONERS, *ALIASES]
    producer = props.get(PRODUCER_PARTITIONER, "").strip()
    if "job.partitioner" not in props:
        return canonical(producer) if producer in names else DEFAULT_PARTITIONER
    name = canonical(get_choice(props, "job.partitioner", DEFAULT_PARTITIONER, names))
    if producer and (producer not in names or canonical(producer) != name):
        raise error(props, PRODUCER_PARTITIONER,
                    f"{producer!r} places keys differently from job.partitioner={name} "
                    f"(at {describe(props, 'job.partitioner')}); set one of them, or both alike")
    return name


def _refuse_high_level_app(props: Properties) -> None:
    """One clear line for a Samza high-level (or TaskApplication) config: millpond runs
    low-level StreamTask classes (task.class) and its own dataflow apps (app.class naming a
    millpond.streams.App as ``module:attribute``), not Java application classes."""
    app = props.get("app.class", "").strip()
    if app and ":" not in app and not props.get("task.class", "").strip():
        raise error(
            props, "app.class",
            f"{app} is a Samza application class; millpond runs low-level StreamTask jobs "
            "(write the logic as a millpond.StreamTask subclass and set "
            "task.class=<package.module.Class> and task.inputs=kafka.<topic>[,...]) or "
            "millpond.streams apps (app.class=<module>:<attribute>)",
        )


"""The ``job.*`` and ``task.*`` settings, with Samza's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from millpond.config.errors import ConfigError
from millpond.config.properties import Properties
from millpond.config.values import (
    StreamRef,
    error,
    get_bool,
    get_choice,
    get_int,
    get_stream,
    parse_stream,
)

PROCESSING_GUARANTEES = ("at-least-once", "effectively-once", "exactly-once")
DEFAULT_SYSTEM = "kafka"


@dataclass(frozen=True)
class JobConfig:
    """What to run and how: inputs, timers, guarantees, where local state lives."""

    name: str
    id: str = "1"
    task_class: str | None = None
    inputs: list[StreamRef] = field(default_factory=list)
    window_ms: int = -1  # -1: window() is never called
    commit_ms: int = 60000
    processing_guarantee: str = "effectively-once"
    logged_store_base_dir: Path = Path("state")
    changelog_system: str = DEFAULT_SYSTEM
    drop_deserialization_errors: bool = False
    dlq_stream: StreamRef | None = None


def parse_job(props: Properties) -> JobConfig:
    """Read the job settings; ``job.name`` is required."""
    if "job.name" not in props:
        raise ConfigError("is required: every job needs a name", key="job.name")
    name = props["job.name"].strip()
    if not name:
        raise error(props, "job.name", "must not be empty")
    inputs = [
        parse_stream(props, "task.inputs", item, DEFAULT_SYSTEM)
        for item in props.get("task.inputs", "").split(",")
        if item.strip()
    ]
    base_dir = props.get("job.logged.store.base.dir", "").strip()
    return JobConfig(
        name=name,
        id=props.get("job.id", "1").strip() or "1",
        task_class=props.get("task.class", "").strip() or None,
        inputs=inputs,
        window_ms=get_int(props, "task.window.ms", -1),
        commit_ms=get_int(props, "task.commit.ms", 60000),
        processing_guarantee=get_choice(
            props, "task.processing.guarantee", "effectively-once", PROCESSING_GUARANTEES
        ),
        logged_store_base_dir=Path(base_dir) if base_dir else Path("state"),
        changelog_system=props.get("job.changelog.system", "").strip() or DEFAULT_SYSTEM,
        drop_deserialization_errors=get_bool(props, "task.drop.deserialization.errors", False),
        dlq_stream=get_stream(props, "task.dlq.stream", DEFAULT_SYSTEM),
    )


"""``Config``: a job's properties file plus overrides and ``${ENV}`` values, as typed views."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from millpond.config.backup import BackupConfig, parse_backup
from millpond.config.errors import ConfigError
from millpond.config.job import JobConfig, parse_job
from millpond.config.keycheck import check_keys, misspelt
from millpond.config.memory import MemoryPlan, plan_memory
from millpond.config.properties import Properties, load_properties
from millpond.config.samza_keys import check_refused, log_ignored, unresolved_ok
from millpond.config.serdes import SerdeSpec, resolve_serde
from millpond.config.stores import StoreConfig, parse_stores
from millpond.config.systems import SystemConfig, parse_systems
from millpond.config.values import StreamRef, describe, missing, where

OVERRIDE = "override"
# ``${NAME}``; ``$${NAME}`` is the escape that stands for ``${NAME}`` itself.
_ENV_REF = re.compile(r"\$(\$?)\{([^}]+)\}")


class Config:
    """A validated job configuration: ``job``, ``stores`` and ``systems`` views plus raw access."""

    def __init__(self, props: Properties) -> None:
        self.properties = props
        check_refused(props)
        self.job: JobConfig = parse_job(props)
        self.systems: dict[str, SystemConfig] = parse_systems(props)
        default_changelog = (f"{self.job.name}-{self.job.id}-{{store}}-changelog"
                             if props.get("job.changelog.system", "").strip() else None)
        self.stores: dict[str, StoreConfig] = parse_stores(
            props, self.job.changelog_system, default_changelog)
        self.ignored: list[str] = log_ignored(props)  # Samza keys millpond does not use
        self.backup: BackupConfig | None = parse_backup(props)
        # The process's memory budget (job.container.memory.mb) and how it is divided.
        self.memory: MemoryPlan = plan_memory(
            props, {name: store.properties for name, store in self.stores.items()})

    @classmethod
    def from_properties(cls, props: Properties) -> Config:
        """Validate already-parsed properties (no overrides, no env substitution)."""
        return cls(props)

    @classmethod
    def load(
        cls,
        path: str | Path,
        overrides: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        transform: Callable[[Properties], Properties] | None = None,
    ) -> Config:
        """Read ``path``, apply ``key=value`` overrides, substitute ``${NAME}`` from ``env``
        (then ``transform`` the properties: a dataflow app's compiler adds its keys)."""
        props = load_properties(path)
        for override in overrides:
            key, eq, value = override.partition("=")
            if not eq or not key.strip():
                raise ConfigError(
                    f"bad --config-override {override!r}: expected key=value", file=OVERRIDE
                )
            props.set(key.strip(), value, OVERRIDE)
        props = substitute_env(props, os.environ if env is None else env)
        check_keys(props)  # the user's own keys only, not the ones a transform adds
        try:
            return cls(transform(props) if transform is not None else props)
        except ConfigError as e:
            point_at_misspelling(props, e)
            if e.file is None:  # e.g. a missing required key: point at the file at least
                e.file = str(path)
            raise

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.properties.get(key, default)

    def location(self, key: str) -> str:
        """``file:line`` or ``override`` for ``key``; the config file when it is not set."""
        return describe(self.properties, key)

    def missing(self, key: str, why: str, example: str) -> ConfigError:
        """The error for a required ``key`` that is unset or empty: names the file (and the
        line when the key is there but empty), why it is needed and an example line."""
        error = missing(self.properties, key, why, example)
        point_at_misspelling(self.properties, error)
        return error

    def bootstrap_servers(self, system: str = "kafka") -> str:
        """``systems.<system>.bootstrap.servers`` (or the consumer's / producer's); a clear
        ConfigError naming the file and an example line when none is set."""
        found = self.systems.get(system)
        if found is None or not found.bootstrap_servers:
            raise self.missing(
                f"systems.{system}.bootstrap.servers",
                f"the Kafka brokers of system {system!r} (or set systems.{system}.consumer."
                "bootstrap.servers)", f"systems.{system}.bootstrap.servers=localhost:9092")
        return found.bootstrap_servers

    def serde_spec(self, name: str, key: str | None = None) -> SerdeSpec:
        """Resolve serde ``name`` referenced by config ``key``; unknown -> ConfigError at ``key``."""
        return resolve_serde(self.properties, name, key)

    def stream_serdes(self, ref: StreamRef) -> tuple[str | None, str | None]:
        """(key serde, msg serde) names for ``ref``: per-stream, else the system's defaults."""
        system = self.systems.get(ref.system)
        return system.stream_serdes(ref.topic) if system else (None, None)


def point_at_misspelling(props: Properties, error: ConfigError) -> None:
    """A required key that is missing while an unknown key like it is set (``task.inputz``
    for ``task.inputs``): the error points at that line and says so."""
    if error.key is None or not error.message.startswith("is missing") or error.line:
        return
    found = misspelt(props, error.key)
    location = props.location(found) if found else None
    if found is None or location is None:
        return
    error.file, error.line = location[0], location[1] or None
    error.message += f"; this line sets {found}: a misspelling of {error.key}?"


def substitute_env(props: Properties, env: Mapping[str, str]) -> Properties:
    """A copy of ``props`` with every ``${NAME}`` in values replaced from ``env``, and every
    ``$${NAME}`` by the text ``${NAME}`` (the escape for a value that must keep it).

    An unset variable is an error naming the key, file and line, except in a key millpond
    ignores (e.g. ``yarn.package.path=file://${basedir}/...``): that value stays as written.
    """
    result = props.copy()
    for key, value in props.items():
        if "${" not in value:
            continue

        def lookup(match: re.Match[str], key: str = key) -> str:
            if match[1]:  # $${NAME}: the text ${NAME}, not looked up
                return match[0][1:]
            name = match[2]
            if name not in env:
                if unresolved_ok(key, props):
                    return match[0]
                file, line = where(props, key)
                raise ConfigError(
                    f"environment variable {name} is not set (used as ${{{name}}})",
                    key=key, file=file, line=line,
                )
            return env[name]

        file, line = props.location(key) or (OVERRIDE, 0)
        result.set(key, _ENV_REF.sub(lookup, value), file, line)
    return result

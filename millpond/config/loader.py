"""``Config``: a job's properties file plus overrides and ``${ENV}`` values, as typed views."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from millpond.config.errors import ConfigError
from millpond.config.job import JobConfig, parse_job
from millpond.config.properties import Properties, load_properties
from millpond.config.serdes import SerdeSpec, resolve_serde
from millpond.config.stores import StoreConfig, parse_stores
from millpond.config.systems import SystemConfig, parse_systems
from millpond.config.values import StreamRef, describe, where

OVERRIDE = "override"
_ENV_REF = re.compile(r"\$\{([^}]+)\}")


class Config:
    """A validated job configuration: ``job``, ``stores`` and ``systems`` views plus raw access."""

    def __init__(self, props: Properties) -> None:
        self.properties = props
        self.job: JobConfig = parse_job(props)
        self.systems: dict[str, SystemConfig] = parse_systems(props)
        default_changelog = (f"{self.job.name}-{self.job.id}-{{store}}-changelog"
                             if props.get("job.changelog.system", "").strip() else None)
        self.stores: dict[str, StoreConfig] = parse_stores(
            props, self.job.changelog_system, default_changelog)

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
    ) -> Config:
        """Read ``path``, apply ``key=value`` overrides, substitute ``${NAME}`` from ``env``."""
        props = load_properties(path)
        for override in overrides:
            key, eq, value = override.partition("=")
            if not eq or not key.strip():
                raise ConfigError(
                    f"bad --config-override {override!r}: expected key=value", file=OVERRIDE
                )
            props.set(key.strip(), value, OVERRIDE)
        props = substitute_env(props, os.environ if env is None else env)
        try:
            return cls(props)
        except ConfigError as e:
            if e.file is None:  # e.g. a missing required key: point at the file at least
                e.file = str(path)
            raise

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.properties.get(key, default)

    def location(self, key: str) -> str:
        """``file:line``, ``override`` or ``<default>`` (not set) for ``key``."""
        return describe(self.properties, key)

    def serde_spec(self, name: str, key: str | None = None) -> SerdeSpec:
        """Resolve serde ``name`` referenced by config ``key``; unknown -> ConfigError at ``key``."""
        return resolve_serde(self.properties, name, key)

    def stream_serdes(self, ref: StreamRef) -> tuple[str | None, str | None]:
        """(key serde, msg serde) names for ``ref``: per-stream, else the system's defaults."""
        system = self.systems.get(ref.system)
        return system.stream_serdes(ref.topic) if system else (None, None)


def substitute_env(props: Properties, env: Mapping[str, str]) -> Properties:
    """A copy of ``props`` with every ``${NAME}`` in values replaced from ``env``."""
    result = props.copy()
    for key, value in props.items():
        if "${" not in value:
            continue

        def lookup(match: re.Match[str], key: str = key) -> str:
            name = match[1]
            if name not in env:
                file, line = where(props, key)
                raise ConfigError(
                    f"environment variable {name} is not set (used as ${{{name}}})",
                    key=key, file=file, line=line,
                )
            return env[name]

        file, line = props.location(key) or (OVERRIDE, 0)
        result.set(key, _ENV_REF.sub(lookup, value), file, line)
    return result

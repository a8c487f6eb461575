"""Resolve a serde name (as used by stores and streams) to its ``serializers.registry`` entry."""

from __future__ import annotations

from dataclasses import dataclass, field

from millpond.config.errors import ConfigError
from millpond.config.properties import Properties
from millpond.config.values import describe, where, with_prefix

BUILTIN_SERDES = ("string", "json", "integer", "long", "double", "bytes", "uuid", "avro", "byte")


@dataclass(frozen=True)
class SerdeSpec:
    """How to build a serde: ``factory`` is a short name, Samza class or Python path."""

    name: str
    factory: str
    params: dict[str, str] = field(default_factory=dict)
    location: str = "<default>"  # "file:line" of the key that referenced this serde


def resolve_serde(props: Properties, name: str, key: str | None = None) -> SerdeSpec:
    """The spec for serde ``name``, referenced by config ``key`` (for error locations).

    A ``serializers.registry.<name>.class`` entry wins; otherwise ``name`` must be a built-in.
    """
    prefix = f"serializers.registry.{name}."
    entry = with_prefix(props, prefix)
    factory = entry.pop("class", "").strip()
    location = describe(props, key if key else prefix + "class")
    if not factory:
        if name not in BUILTIN_SERDES:
            file, line = where(props, key) if key else (None, None)
            raise ConfigError(
                f"unknown serde {name!r}: set {prefix}class or use a built-in "
                f"({', '.join(BUILTIN_SERDES)})",
                key=key, file=file, line=line,
            )
        factory = name
    return SerdeSpec(name=name, factory=factory, params=entry, location=location)

"""Config mistakes named at load: unknown keys in millpond's own namespaces (with the closest
known key) and keys a file sets twice (with both lines).

Each is a :class:`~millpond.config.errors.ConfigWarning`; with ``job.config.strict=true`` the
first one is a :class:`~millpond.config.errors.ConfigError` instead. A key is known when the
config schema (:mod:`millpond.config.schema`) or Samza's table
(:mod:`millpond.config.samza_keys`) has it; ``systems.<system>.<prop>`` also when librdkafka
knows ``<prop>``. Keys outside the namespaces below are the task's own and never checked.
"""

from __future__ import annotations

import difflib
import warnings

from millpond.config import schema
from millpond.config.errors import ConfigError, ConfigWarning
from millpond.config.librdkafka import known_to_librdkafka
from millpond.config.properties import Properties
from millpond.config.samza_keys import samza_key
from millpond.config.values import describe, get_bool, where

NAMESPACES = ("task.", "job.", "stores.", "systems.", "serializers.", "metrics.", "app.")
STRICT = "job.config.strict"
_SYSTEM_PROP = "systems.<system>.<prop>"
# Checked where they are read, with their own warnings: a store's keys
# (millpond.config.stores) and a metrics reporter's (millpond.metrics.config).
_CHECKED_ELSEWHERE = ("metrics.reporter.",)


def check_keys(props: Properties) -> None:
    """Warn (or, with ``job.config.strict=true``, raise) for each key set twice and each
    unknown key in millpond's namespaces, naming file:line and the closest known key."""
    strict = get_bool(props, STRICT, schema.bool_default(STRICT))
    for key, first, again in props.duplicates:
        message = (f"{key} is set twice, at {_at(first)} and {_at(again)}; the value at "
                   f"{_at(again)} is used")
        if strict:
            raise ConfigError(message, file=again[0], line=again[1] or None)
        warnings.warn(f"{_at(again)}: {message}", ConfigWarning, stacklevel=3)
    for key in props:
        if not key.startswith(NAMESPACES) or key.startswith(_CHECKED_ELSEWHERE):
            continue
        if _is_store_key(key) and not strict:
            continue  # millpond.config.stores warns for these itself
        why = unknown_reason(key)
        if why is None:
            continue
        if strict:
            file, line = where(props, key)
            why = why.replace("; it is ignored", f" ({STRICT}=true)")
            raise ConfigError(why, key=key, file=file or props.source,
                              line=line)
        warnings.warn(f"{describe(props, key)}: {key}: {why}", ConfigWarning, stacklevel=3)


def unknown_reason(key: str) -> str | None:
    """None for a key millpond or Samza's table knows; else why it is unknown, with the
    closest known key when one is close."""
    if samza_key(key) is not None:
        return None
    entry = schema.lookup(key)
    if entry is not None and entry.name != _SYSTEM_PROP:
        return None
    if entry is not None and known_to_librdkafka(key.split(".", 2)[2], "consumer"):
        return None  # systems.<s>.<prop>: a librdkafka setting for every client
    close = closest(key)
    hint = f" (did you mean {close}?)" if close else ""
    return f"unknown key: neither millpond nor Samza reads it{hint}; it is ignored"


def closest(key: str) -> str | None:
    """The known key (a schema entry, each ``<name>`` filled in with the part of ``key`` at
    its place) closest to ``key``, or None when none is close."""
    parts = key.split(".")
    candidates = [".".join(parts[i] if p.startswith("<") and i < len(parts) else p
                           for i, p in enumerate(k.name.split("."))) for k in schema.KEYS]
    found = difflib.get_close_matches(key, candidates, n=1, cutoff=0.75)
    return found[0] if found else None


def misspelt(props: Properties, missing: str) -> str | None:
    """A key set in ``props`` that is unknown and looks like the ``missing`` one (for the
    error about a required key: ``task.inputz`` for ``task.inputs``), or None."""
    unknown = [k for k in props if k.startswith(NAMESPACES) and unknown_reason(k) is not None]
    found = difflib.get_close_matches(missing, unknown, n=1, cutoff=0.8)
    return found[0] if found else None


def _is_store_key(key: str) -> bool:
    return key.startswith("stores.") and key.count(".") >= 2


def _at(location: tuple[str, int]) -> str:
    file, line = location
    return f"{file}:{line}" if line else file

"""Typed reads of single properties (ints, booleans, choices, stream names) with located errors."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from millpond.config.errors import ConfigError
from millpond.config.properties import Properties

_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?[0-9]*\.[0-9]+")
_BOOLS = {"true": True, "false": False}


@dataclass(frozen=True)
class StreamRef:
    """A stream on a system, written ``system.topic`` in config (e.g. ``kafka.page-views``)."""

    system: str
    topic: str

    @classmethod
    def parse(cls, text: str, default_system: str) -> StreamRef:
        """Text before the first dot is the system; a bare topic gets ``default_system``.

        Raises ValueError for an empty system or topic.
        """
        system, dot, topic = text.strip().partition(".")
        if not dot:
            system, topic = default_system, system
        if not system or not topic:
            raise ValueError(f"expected 'system.topic' or 'topic', got {text!r}")
        return cls(system, topic)

    def __str__(self) -> str:
        return f"{self.system}.{self.topic}"


def where(props: Properties, key: str) -> tuple[str | None, int | None]:
    """``(file, line)`` of ``key`` for error messages; line is None for overrides/unset keys."""
    location = props.location(key)
    if location is None:
        return None, None
    return location[0], location[1] or None


def describe(props: Properties, key: str) -> str:
    """``file:line``, ``override`` (a file with no line), or the config file itself when
    ``key`` is unset (``<default>`` only for properties read from no file)."""
    file, line = where(props, key)
    return f"{file}:{line}" if line else (file or props.source or "<default>")


def missing(props: Properties, key: str, why: str, example: str) -> ConfigError:
    """A ConfigError for a required ``key`` that is unset (named in the config file) or empty
    (at its line), with an example line to add."""
    file, line = where(props, key)
    state = "is empty" if key in props else "is missing"
    return ConfigError(f"{state}: {why} (add a line like `{example}`)", key=key,
                       file=file or props.source, line=line)


def error(props: Properties, key: str, message: str,
          kind: type[ConfigError] = ConfigError) -> ConfigError:
    """A ConfigError (or ``kind``) for ``key`` located where ``key`` was set."""
    file, line = where(props, key)
    return kind(message, key=key, file=file, line=line)


def parse_int(text: str) -> int:
    """An integer written as Java's ``Integer.parseInt`` reads it: an optional sign and ASCII
    digits, nothing else (Python's ``int()`` also takes ``1_000`` and other scripts' digits
    such as ``٣``; ``isdigit()`` also passes ``²``, which ``int()`` then refuses). Surrounding
    white space is ignored. Raises ValueError saying what was expected."""
    stripped = text.strip()
    if not _INT.fullmatch(stripped):
        hint = ""
        if "_" in stripped:
            hint = " (no _ separators)"
        elif any(not c.isascii() for c in stripped):
            hint = " (ASCII digits 0-9 only)"
        raise ValueError(f"expected an integer{hint}, got {text!r}")
    return int(stripped)


def parse_bool(text: str) -> bool:
    """``true``/``false`` in any case (white space ignored); anything else is a ValueError,
    unlike Java's lenient ``Boolean.parseBoolean``."""
    value = _BOOLS.get(text.strip().lower())
    if value is None:
        raise ValueError(f"expected true or false, got {text!r}")
    return value


def check_range(number: int, minimum: int | None = None, maximum: int | None = None) -> int:
    """``number``, or a ValueError if it is below ``minimum`` or above ``maximum``."""
    if minimum is not None and maximum is not None and not minimum <= number <= maximum:
        raise ValueError(f"must be from {minimum} to {maximum}, got {number}")
    if minimum is not None and number < minimum:
        raise ValueError(f"must be at least {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise ValueError(f"must be at most {maximum}, got {number}")
    return number


def parse_scalar(text: str) -> bool | int | float | str:
    """A pass-through option's value typed as a library expects it: ``true``/``false`` (any
    case) a bool, an integer (:func:`parse_int`) an int, a decimal such as ``2.5`` a float,
    anything else the text, stripped."""
    stripped = text.strip()
    if stripped.lower() in _BOOLS:
        return _BOOLS[stripped.lower()]
    if _INT.fullmatch(stripped):
        return int(stripped)
    if _DECIMAL.fullmatch(stripped):
        return float(stripped)
    return stripped


def deep_merge(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` with ``overrides`` merged in, nested mappings key by key (a user's
    ``config_kwargs.read_timeout`` keeps the default ``config_kwargs.connect_timeout``); a
    value that is not a mapping on both sides is replaced. Neither argument is changed."""
    out: dict[str, Any] = {k: _copy(v) for k, v in defaults.items()}
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = _copy(value)
    return out


def _copy(value: Any) -> Any:
    return deep_merge({}, value) if isinstance(value, Mapping) else value


def get_int(props: Properties, key: str, default: int, minimum: int | None = None,
            maximum: int | None = None, kind: type[ConfigError] = ConfigError) -> int:
    """An integer property (:func:`parse_int`) within ``minimum``..``maximum``; any problem is
    a ConfigError (or ``kind``) at the key's file and line."""
    value = props.get(key)
    if value is None:
        return default
    try:
        return check_range(parse_int(value), minimum, maximum)
    except ValueError as exc:
        raise error(props, key, str(exc), kind) from None


def get_optional_int(props: Properties, key: str, minimum: int | None = None) -> int | None:
    return get_int(props, key, 0, minimum) if key in props else None


def get_bool(props: Properties, key: str, default: bool) -> bool:
    """``true``/``false`` (any case); anything else is an error, unlike Java's lenient parse."""
    value = props.get(key)
    if value is None:
        return default
    try:
        return parse_bool(value)
    except ValueError as exc:
        raise error(props, key, str(exc)) from None


def get_mode(props: Properties, key: str, default: int) -> int:
    """An octal permission mode for directories (``0750``): the owner needs rwx."""
    value = props.get(key)
    if value is None:
        return default
    digits = value.strip()
    digits = digits[2:] if digits[:2] in ("0o", "0O") else digits
    if not (3 <= len(digits) <= 4 and all(c in "01234567" for c in digits)):
        raise error(props, key, f"expected an octal mode such as 0750, got {value!r}")
    mode = int(digits, 8)
    if mode > 0o777:
        raise error(props, key, f"{value!r} sets special bits (setuid, setgid or sticky); give "
                                "the permission bits only, such as 0750")
    if mode & 0o700 != 0o700:
        raise error(props, key, f"{value!r} does not give the owner rwx (7 as the first "
                                "digit): millpond reads and writes its own directories")
    return mode


def get_choice(props: Properties, key: str, default: str, choices: Sequence[str]) -> str:
    value = props.get(key, default).strip()
    if value not in choices:
        raise error(props, key, f"unknown value {value!r}; valid values: {', '.join(choices)}")
    return value


def get_stream(props: Properties, key: str, default_system: str) -> StreamRef | None:
    value = props.get(key)
    return None if value is None else parse_stream(props, key, value, default_system)


def parse_stream(props: Properties, key: str, text: str, default_system: str) -> StreamRef:
    try:
        return StreamRef.parse(text, default_system)
    except ValueError as e:
        raise error(props, key, str(e)) from None


def with_prefix(props: Mapping[str, str], prefix: str) -> dict[str, str]:
    """Every property under ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix) and k != prefix}


def sub_properties(props: Properties, prefix: str) -> Properties:
    """Every property under ``prefix``, with the prefix removed and each key's file and line
    kept (so a reader of the part, e.g. a store's RocksDB options, can locate its errors)."""
    out = Properties(props.source, props.prefix + prefix)
    for key, value in props.items():
        if key.startswith(prefix) and key != prefix:
            file, line = props.location(key) or (props.source or "<default>", 0)
            out.set(key[len(prefix):], value, file, line)
    return out

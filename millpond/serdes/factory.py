"""build_serde: turn a config SerdeSpec into a Serde instance.

``spec.factory`` may be a short built-in name ("string", "json", "integer", "long", "double",
"bytes", "uuid", "avro"), a Samza serde factory class name (mapped to the serde with Samza's
byte layout: ``SAMZA_ALIASES``; Samza's Integer/Long serdes are two's complement, unlike
millpond's order-preserving ``integer``/``long``), or a dotted
Python path "pkg.mod.Name" to a Serde class/factory (called with ``spec.params`` as keyword
arguments when its signature accepts them, else with no arguments) or to a ready Serde object.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from millpond.serdes.api import Serde

if TYPE_CHECKING:
    from millpond.config import Config, StoreConfig
from millpond.serdes.avro import AvroSerde
from millpond.serdes.builtins import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    SamzaIntegerSerde,
    SamzaLongSerde,
    StringSerde,
    UUIDSerde,
)
from millpond.serdes.errors import SerdeConfigError, SerdeError


class SerdeSpecLike(Protocol):
    """What build_serde reads from ``millpond.config.SerdeSpec`` (kept structural: no import)."""

    @property
    def name(self) -> str: ...
    @property
    def factory(self) -> str: ...
    @property
    def params(self) -> Mapping[str, str]: ...
    @property
    def location(self) -> str: ...


def _string(name: str, params: Mapping[str, str], location: str) -> Serde[Any]:
    return StringSerde(name, params.get("encoding", "utf-8"))


def _avro(name: str, params: Mapping[str, str], location: str) -> Serde[Any]:
    if "schema" not in params:
        raise SerdeConfigError(name, f"avro needs serializers.registry.{name}.schema", location=location)
    return AvroSerde(params["schema"], name=name, location=location)


_Builder = Callable[[str, Mapping[str, str], str], Serde[Any]]

BUILTINS: dict[str, _Builder] = {
    "string": _string,
    "json": lambda name, params, location: JsonSerde(name),
    "integer": lambda name, params, location: IntegerSerde(name),
    "long": lambda name, params, location: LongSerde(name),
    "double": lambda name, params, location: DoubleSerde(name),
    "bytes": lambda name, params, location: BytesSerde(name),
    "uuid": lambda name, params, location: UUIDSerde(name),
    "avro": _avro,
    # Samza's layouts, reached through Samza's class names (SAMZA_ALIASES)
    "samza-integer": lambda name, params, location: SamzaIntegerSerde(name),
    "samza-long": lambda name, params, location: SamzaLongSerde(name),
}

_SAMZA = "org.apache.samza.serializers."
# Samza's serde factories -> the serde writing exactly Samza's bytes.
SAMZA_ALIASES: dict[str, str] = {
    _SAMZA + "StringSerdeFactory": "string",  # UTF-8 or serializers.registry.<n>.encoding
    _SAMZA + "JsonSerdeFactory": "json",  # Jackson: compact UTF-8 JSON
    _SAMZA + "JsonSerdeV2Factory": "json",
    _SAMZA + "MetricsSnapshotSerdeFactory": "json",  # a JSON object written by Jackson
    _SAMZA + "IntegerSerdeFactory": "samza-integer",  # 4 bytes, two's complement
    _SAMZA + "LongSerdeFactory": "samza-long",  # 8 bytes, two's complement
    _SAMZA + "DoubleSerdeFactory": "double",  # 8 bytes IEEE 754 big-endian
    _SAMZA + "ByteSerdeFactory": "bytes",
    _SAMZA + "BytesSerdeFactory": "bytes",
    _SAMZA + "ByteBufferSerdeFactory": "bytes",  # a ByteBuffer's remaining bytes
    _SAMZA + "UUIDSerdeFactory": "uuid",  # 16 bytes: msb, lsb big-endian
}
# Samza serdes with no layout a Python job can share: refused with the reason.
SAMZA_UNSUPPORTED: dict[str, str] = {
    _SAMZA + "SerializableSerdeFactory": "Java object serialization has no Python reader; "
                                         "re-encode the data (e.g. as JSON)",
}


def build_serde(spec: SerdeSpecLike) -> Serde[Any]:
    """Build the serde ``spec`` describes; SerdeError (naming spec.location) if impossible."""
    factory = spec.factory.strip()
    short = SAMZA_ALIASES.get(factory, factory)
    builder = BUILTINS.get(short)
    try:
        if factory in SAMZA_UNSUPPORTED:
            raise SerdeConfigError(spec.name, f"{factory} is not supported: "
                                        f"{SAMZA_UNSUPPORTED[factory]}")
        if builder is not None:
            return builder(spec.name, spec.params, spec.location)
        if "." not in factory:
            known = ", ".join(sorted(BUILTINS))
            raise SerdeConfigError(
                spec.name,
                f"unknown serde factory {factory!r} (built-ins: {known}; "
                "or give a Samza serde factory class or a dotted Python path)",
            )
        return _from_dotted_path(spec.name, factory, spec.params)
    except SerdeError as exc:
        if exc.location is None:
            exc.location = spec.location
        raise


def _from_dotted_path(name: str, path: str, params: Mapping[str, str]) -> Serde[Any]:
    module_name, _, attr = path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SerdeConfigError(name, f"cannot import {path!r}: {exc}") from exc
    serde: Any = target
    if callable(target) and not _is_serde(target):
        kwargs = dict(params) if _accepts(target, params) else {}
        try:
            serde = target(**kwargs)
        except Exception as exc:
            raise SerdeConfigError(name, f"{path}({_show(kwargs)}) failed: {exc}") from exc
    if not _is_serde(serde):
        raise SerdeConfigError(
            name, f"{path} did not give a serde (need to_bytes and from_bytes methods)"
        )
    if not isinstance(getattr(serde, "name", None), str):
        try:
            serde.name = name
        except AttributeError:
            pass  # a serde without a settable name still works; errors just name it less well
    return serde


def _is_serde(obj: object) -> bool:
    if isinstance(obj, type):
        return False
    return callable(getattr(obj, "to_bytes", None)) and callable(getattr(obj, "from_bytes", None))


def _accepts(target: Callable[..., Any], params: Mapping[str, str]) -> bool:
    if not params:
        return False
    try:
        inspect.signature(target).bind(**params)
    except (TypeError, ValueError):
        return False
    return True


def _show(kwargs: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def serdes_for(config: Config, cfg: StoreConfig) -> tuple[Serde[Any], Serde[Any]]:
    """The key and value serdes of a store, from ``stores.<name>.key.serde|msg.serde``."""
    key = build_serde(config.serde_spec(cfg.key_serde, f"stores.{cfg.name}.key.serde"))
    msg = build_serde(config.serde_spec(cfg.msg_serde, f"stores.{cfg.name}.msg.serde"))
    return key, msg

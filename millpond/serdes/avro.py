"""Avro serde: schemaless Avro binary (no header, no schema id) via fastavro.

The schema comes from ``params["schema"]``: inline JSON, or a path to a .avsc file. A relative
path is tried against the working directory, then against the directory of the config file
that referenced the serde.

fastavro is imported when the first Avro serde or schema is made, not with millpond.serdes:
most jobs have none, and its import is ~10 ms of every ``millpond run``'s start-up.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from millpond.serdes.api import Serde
from millpond.serdes.errors import SerdeConfigError, SerdeError


def load_schema(
    name: str, schema: str | dict[str, Any] | list[Any], location: str | None = None
) -> Any:
    """Parse an Avro schema given as a dict/list, inline JSON text, or a .avsc path."""
    from fastavro import parse_schema

    if isinstance(schema, str):
        text = schema.strip()
        if not text.startswith(("{", "[", '"')):
            text = _read_avsc(name, text, location)
        try:
            schema = json.loads(text)
        except ValueError as exc:
            raise SerdeConfigError(name, f"schema is not valid JSON: {exc}", location=location) from exc
    try:
        return parse_schema(schema)
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise SerdeConfigError(name, f"invalid Avro schema: {exc}", location=location) from exc


def _read_avsc(name: str, path_text: str, location: str | None) -> str:
    path = Path(path_text)
    candidates = [path]
    if not path.is_absolute() and location and ":" in location:
        config_file = location.rsplit(":", 1)[0]
        candidates.append(Path(config_file).parent / path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    tried = ", ".join(str(c) for c in candidates)
    raise SerdeConfigError(name, f"schema file not found (tried {tried})", location=location)


class AvroSerde(Serde[Any]):
    """Records (dicts) <-> schemaless Avro binary for one fixed schema."""

    __slots__ = ("name", "schema", "_write", "_read")

    def __init__(
        self,
        schema: str | dict[str, Any] | list[Any],
        name: str = "avro",
        location: str | None = None,
    ) -> None:
        from fastavro import schemaless_reader, schemaless_writer

        self.name = name
        self.schema = load_schema(name, schema, location)
        self._write, self._read = schemaless_writer, schemaless_reader

    def to_bytes(self, obj: Any) -> bytes:
        buf = io.BytesIO()
        try:
            self._write(buf, self.schema, obj)
        except Exception as exc:  # fastavro raises ValueError/TypeError/KeyError/AttributeError
            raise SerdeError(self.name, f"cannot serialize {type(obj).__name__}: {exc}") from exc
        return buf.getvalue()

    def from_bytes(self, data: bytes) -> Any:
        try:
            buf = io.BytesIO(data)
            value = self._read(buf, self.schema, None)
        except Exception as exc:  # truncated/garbage input: EOFError, StopIteration, ValueError...
            raise SerdeError(self.name, f"cannot deserialize {len(data)} bytes: {exc}") from exc
        if buf.tell() != len(data):
            raise SerdeError(
                self.name, f"cannot deserialize: {len(data) - buf.tell()} trailing bytes"
            )
        return value

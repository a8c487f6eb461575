"""Keys from request text and entries as JSON, with a store's serdes.

A key in a request is text, read by the store's key serde: ``string`` as it is, ``integer``
and ``long`` as a decimal number, ``double`` as a number, ``uuid`` in its usual form,
``bytes`` as base64, and every other serde (``json``, ``avro``, a Python class) as JSON text
(a text that is not JSON is taken as a string). Answers render keys and values as JSON: bytes
as base64, an Avro record as its fields (unions untagged; dates and times ISO 8601, decimals
and UUIDs as strings), tuples and sets as lists.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
import uuid
from typing import Any

from millpond.serdes import Serde, SerdeError
from millpond.serdes.builtins import (
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    LongSerde,
    SamzaIntegerSerde,
    SamzaLongSerde,
    StringSerde,
    UUIDSerde,
)

_INTS = (IntegerSerde, LongSerde, SamzaIntegerSerde, SamzaLongSerde)


class BadKey(ValueError):
    """A request's key that the store's key serde cannot take."""


def parse_key(serde: Serde[Any], text: str) -> bytes:
    """The serialized key that ``text`` names, for a store whose key serde is ``serde``."""
    try:
        key: Any
        if isinstance(serde, StringSerde):
            key = text
        elif isinstance(serde, _INTS):
            key = int(text)
        elif isinstance(serde, DoubleSerde):
            key = float(text)
        elif isinstance(serde, UUIDSerde):
            key = uuid.UUID(text)
        elif isinstance(serde, BytesSerde):
            key = base64.b64decode(text, validate=True)
        else:
            try:
                key = json.loads(text)
            except ValueError:
                key = text
        return serde.to_bytes(key)
    except (ValueError, binascii.Error, SerdeError) as exc:
        raise BadKey(f"key {text!r:.80} is not a key of serde {serde.name!r}: {exc}") from exc


def plain(obj: Any) -> Any:
    """A JSON-ready copy of a decoded key or value (nothing shared with the task's object)."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, str) else k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [plain(v) for v in obj]
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(obj)).decode()
    if isinstance(obj, datetime.datetime | datetime.date | datetime.time):
        return obj.isoformat()
    if isinstance(obj, decimal.Decimal | uuid.UUID):
        return str(obj)
    return repr(obj)

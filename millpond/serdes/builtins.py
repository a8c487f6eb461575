"""Built-in serdes: string, json, integer, long, double, bytes, uuid, and Samza's layouts.

millpond's short names ``integer`` and ``long`` sort numerically as raw bytes, negatives
included: the value is written big-endian with the sign bit flipped (i.e. ``value + 2**31`` /
``value + 2**63`` as unsigned). RocksDB orders keys as unsigned bytes, and two's complement
would sort -1 after every positive number, making ``range()`` over numeric keys wrong.

Samza's ``IntegerSerdeFactory`` / ``LongSerdeFactory`` write plain big-endian two's
complement (Java's ``ByteBuffer.putInt/putLong``): ``SamzaIntegerSerde`` / ``SamzaLongSerde``
below, which millpond uses under Samza's class names so an existing Samza changelog reads as
the same numbers. ``double`` (IEEE 754 big-endian), ``string`` (UTF-8 or the configured
encoding), ``bytes`` and ``uuid`` (most then least significant 8 bytes, big-endian) have one
layout, Samza's.
"""

from __future__ import annotations

import codecs
import json
import math
import struct
import uuid
from typing import Any

import orjson

from millpond.serdes.api import Serde
from millpond.serdes.errors import SerdeConfigError, SerdeError


def _describe(obj: object) -> str:
    text = repr(obj)
    return f"{type(obj).__name__} {text[:60] + '...' if len(text) > 60 else text}"


class StringSerde(Serde[str]):
    """str <-> encoded bytes (utf-8 unless ``encoding`` says otherwise, like Samza's StringSerde)."""

    __slots__ = ("name", "encoding", "_utf8")

    def __init__(self, name: str = "string", encoding: str = "utf-8") -> None:
        self.name = name
        try:
            self.encoding = codecs.lookup(encoding).name
        except LookupError as exc:
            raise SerdeConfigError(name, f"unknown encoding {encoding!r}") from exc
        self._utf8 = self.encoding == "utf-8"

    @property
    def sorts_as_objects(self) -> bool:
        """UTF-8 keeps code point order (other encodings need not)."""
        return self._utf8

    def to_bytes(self, obj: str) -> bytes:
        try:
            return str.encode(obj) if self._utf8 else str.encode(obj, self.encoding)
        except (TypeError, UnicodeError) as exc:
            raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: {exc}") from exc

    def from_bytes(self, data: bytes) -> str:
        try:
            return bytes.decode(data) if self._utf8 else bytes.decode(data, self.encoding)
        except (TypeError, UnicodeError) as exc:
            raise SerdeError(self.name, f"cannot deserialize {_describe(data)}: {exc}") from exc


class BytesSerde(Serde[bytes]):
    """bytes pass through unchanged; bytearray/memoryview are copied to bytes."""

    __slots__ = ("name",)

    def __init__(self, name: str = "bytes") -> None:
        self.name = name

    def to_bytes(self, obj: bytes | bytearray | memoryview) -> bytes:
        if type(obj) is bytes:
            return obj
        if isinstance(obj, bytes | bytearray | memoryview):
            return bytes(obj)
        raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: expected bytes")

    def from_bytes(self, data: bytes) -> bytes:
        return data

    @property
    def sorts_as_objects(self) -> bool:
        """Bytes compare as unsigned bytes in Python too."""
        return True


def _has_non_finite(obj: Any) -> bool:
    """True if ``obj`` holds a NaN or infinite float anywhere (orjson writes them as null)."""
    if type(obj) is float:
        return not math.isfinite(obj)
    if isinstance(obj, dict):
        return any(_has_non_finite(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_has_non_finite(v) for v in obj)
    return False


_dumps = orjson.dumps


class JsonSerde(Serde[Any]):
    """Any JSON value <-> compact utf-8 JSON (NaN/Infinity are rejected: they are not JSON).

    Uses orjson for speed; like orjson, integers beyond 64 bits decode as floats.
    """

    __slots__ = ("name", "_encode", "_decode")

    def __init__(self, name: str = "json") -> None:
        self.name = name
        self._encode = json.JSONEncoder(
            separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode
        self._decode = json.JSONDecoder().decode

    def to_bytes(self, obj: Any) -> bytes:
        # orjson is several times faster than the stdlib on the hot path; the stdlib encoder
        # handles what orjson refuses (e.g. ints over 64 bits) and rejects NaN/Infinity,
        # which orjson would silently write as null.
        # Plain dumps first: OPT_NON_STR_KEYS costs ~0.08 us a record even where every key
        # is a str; a dict with other keys (ints, say) is retried with it. find(), not `in`:
        # bytes.__contains__ tries the needle as an int first (~70 ns more a record).
        try:
            data = _dumps(obj)
        except TypeError:
            try:
                data = _dumps(obj, option=orjson.OPT_NON_STR_KEYS)
            except TypeError:
                data = b""
        if data.find(b"null") >= 0 and _has_non_finite(obj):
            raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: NaN/Infinity "
                                        "are not valid JSON")
        if data:
            return data
        try:
            return self._encode(obj).encode()
        except (TypeError, ValueError) as exc:
            raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: {exc}") from exc

    def from_bytes(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # orjson is stricter in corners (e.g. huge ints): let the stdlib decide
        except TypeError as exc:
            raise SerdeError(self.name, f"cannot deserialize {_describe(data)}: {exc}") from exc
        try:
            return self._decode(bytes.decode(data))
        except (TypeError, ValueError) as exc:
            raise SerdeError(self.name, f"cannot deserialize {_describe(data)}: {exc}") from exc


class _OrderedIntSerde(Serde[int]):
    """Signed int of fixed width, stored big-endian with the sign bit flipped (sorts numerically)."""

    __slots__ = ("name",)
    _struct: struct.Struct
    _offset: int

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def sorts_as_objects(self) -> bool:
        """The offset big-endian layout keeps numeric order."""
        return True

    def to_bytes(self, obj: int) -> bytes:
        if type(obj) is not int and (isinstance(obj, bool) or not isinstance(obj, int)):
            raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: expected int")
        try:
            return self._struct.pack(obj + self._offset)
        except struct.error as exc:
            bits = self._struct.size * 8
            raise SerdeError(
                self.name, f"cannot serialize {obj}: outside the signed {bits}-bit range"
            ) from exc

    def from_bytes(self, data: bytes) -> int:
        try:
            value: int = self._struct.unpack(data)[0]
        except (struct.error, TypeError) as exc:
            raise SerdeError(
                self.name, f"cannot deserialize {_describe(data)}: need {self._struct.size} bytes"
            ) from exc
        return value - self._offset


class IntegerSerde(_OrderedIntSerde):
    """32-bit signed int in 4 order-preserving bytes (see module docstring)."""

    __slots__ = ()
    _struct = struct.Struct(">I")
    _offset = 1 << 31

    def __init__(self, name: str = "integer") -> None:
        super().__init__(name)


class LongSerde(_OrderedIntSerde):
    """64-bit signed int in 8 order-preserving bytes (see module docstring)."""

    __slots__ = ()
    _struct = struct.Struct(">Q")
    _offset = 1 << 63

    def __init__(self, name: str = "long") -> None:
        super().__init__(name)


class DoubleSerde(Serde[float]):
    """float <-> 8-byte IEEE 754 big-endian (Samza's DoubleSerde format); ints are widened."""

    __slots__ = ("name",)
    _struct = struct.Struct(">d")

    def __init__(self, name: str = "double") -> None:
        self.name = name

    def to_bytes(self, obj: float) -> bytes:
        if isinstance(obj, bool) or not isinstance(obj, float | int):
            raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: expected float")
        try:
            return self._struct.pack(obj)
        except (struct.error, OverflowError) as exc:
            raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: {exc}") from exc

    def from_bytes(self, data: bytes) -> float:
        try:
            value: float = self._struct.unpack(data)[0]
        except (struct.error, TypeError) as exc:
            raise SerdeError(
                self.name, f"cannot deserialize {_describe(data)}: need 8 bytes"
            ) from exc
        return value


class _TwosComplementSerde(_OrderedIntSerde):
    """Signed int of fixed width, big-endian two's complement (Java's ByteBuffer layout):
    the ordered layout's code with no offset and a signed struct."""

    __slots__ = ()
    _offset = 0

    @property
    def sorts_as_objects(self) -> bool:
        """Negative numbers sort after the positive ones as bytes."""
        return False


class SamzaIntegerSerde(_TwosComplementSerde):
    """Samza's IntegerSerde: 4 bytes, big-endian two's complement (-1 -> ff ff ff ff)."""

    __slots__ = ()
    _struct = struct.Struct(">i")

    def __init__(self, name: str = "samza-integer") -> None:
        super().__init__(name)


class SamzaLongSerde(_TwosComplementSerde):
    """Samza's LongSerde: 8 bytes, big-endian two's complement."""

    __slots__ = ()
    _struct = struct.Struct(">q")

    def __init__(self, name: str = "samza-long") -> None:
        super().__init__(name)


class UUIDSerde(Serde[uuid.UUID]):
    """uuid.UUID <-> 16 bytes: most then least significant 64 bits, big-endian (Samza's
    UUIDSerde; the same as ``UUID.bytes``). A str in UUID form is accepted on write."""

    __slots__ = ("name",)

    def __init__(self, name: str = "uuid") -> None:
        self.name = name

    def to_bytes(self, obj: uuid.UUID) -> bytes:
        if isinstance(obj, uuid.UUID):
            return obj.bytes
        if isinstance(obj, str):
            try:
                return uuid.UUID(obj).bytes
            except ValueError as exc:
                raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: {exc}") from exc
        raise SerdeError(self.name, f"cannot serialize {_describe(obj)}: expected uuid.UUID")

    def from_bytes(self, data: bytes) -> uuid.UUID:
        if not isinstance(data, bytes | bytearray) or len(data) != 16:
            raise SerdeError(self.name, f"cannot deserialize {_describe(data)}: need 16 bytes")
        return uuid.UUID(bytes=bytes(data))

"""Samza's serde class names produce exactly Samza's bytes.

The byte vectors are Samza's own (samza-api/src/test/java/org/apache/samza/serializers/Test*Serde
.java: e.g. IntegerSerde 37 -> 00 00 00 25, LongSerde 1234123412341234L -> 00 04 62 6d bf 9a
01 f2, DoubleSerde 9.156013e-002 -> 3f b7 70 7c 13 f7 ae a3, UUIDSerde new UUID(13, 42)) plus
Java ByteBuffer's big-endian two's complement for negatives and the edges.
"""

from __future__ import annotations

import uuid

import pytest

from millpond.config import SerdeSpec
from millpond.serdes import SerdeError, build_serde

SAMZA = "org.apache.samza.serializers."


def samza(factory: str, **params: str) -> object:
    return build_serde(SerdeSpec("s", SAMZA + factory, params, "job.properties:1"))


def java_bytes(*signed: int) -> bytes:
    """Bytes written as Java's signed byte literals (as in Samza's tests)."""
    return bytes(b & 0xFF for b in signed)


@pytest.mark.parametrize(("value", "expected"), [
    (37, "00000025"),  # TestIntegerSerde
    (1, "00000001"),
    (0, "00000000"),
    (-1, "ffffffff"),
    (-2, "fffffffe"),
    (2**31 - 1, "7fffffff"),
    (-(2**31), "80000000"),
])
def test_integer_serde_factory_is_twos_complement(value: int, expected: str) -> None:
    serde = samza("IntegerSerdeFactory")
    assert serde.to_bytes(value).hex() == expected  # type: ignore[attr-defined]
    assert serde.from_bytes(bytes.fromhex(expected)) == value  # type: ignore[attr-defined]


@pytest.mark.parametrize(("value", "expected"), [
    (1234123412341234, java_bytes(0, 4, 98, 109, -65, -102, 1, -14)),  # TestLongSerde
    (1, bytes.fromhex("0000000000000001")),
    (-1, bytes.fromhex("ffffffffffffffff")),
    (-(2**63), bytes.fromhex("8000000000000000")),
    (2**63 - 1, bytes.fromhex("7fffffffffffffff")),
])
def test_long_serde_factory_is_twos_complement(value: int, expected: bytes) -> None:
    serde = samza("LongSerdeFactory")
    assert serde.to_bytes(value) == expected  # type: ignore[attr-defined]
    assert serde.from_bytes(expected) == value  # type: ignore[attr-defined]


def test_out_of_range_and_wrong_length_fail_naming_the_serde() -> None:
    serde = samza("IntegerSerdeFactory")
    with pytest.raises(SerdeError, match="32-bit"):
        serde.to_bytes(2**31)  # type: ignore[attr-defined]
    with pytest.raises(SerdeError, match="need 4 bytes"):
        serde.from_bytes(b"\x00" * 8)  # type: ignore[attr-defined]
    with pytest.raises(SerdeError, match="expected int"):
        samza("LongSerdeFactory").to_bytes(True)  # type: ignore[attr-defined]


def test_millpond_short_names_keep_the_order_preserving_layout() -> None:
    integer = build_serde(SerdeSpec("i", "integer", {}, "x"))
    long = build_serde(SerdeSpec("l", "long", {}, "x"))
    assert integer.to_bytes(-1).hex() == "7fffffff" and integer.to_bytes(1).hex() == "80000001"
    assert long.to_bytes(-1).hex() == "7fffffffffffffff"
    values = [-(2**31), -5, -1, 0, 1, 7, 2**31 - 1]
    assert sorted(values, key=integer.to_bytes) == values


def test_double_serde_factory() -> None:
    serde = samza("DoubleSerdeFactory")
    expected = java_bytes(63, -73, 112, 124, 19, -9, -82, -93)  # TestDoubleSerde
    assert serde.to_bytes(9.156013e-002) == expected  # type: ignore[attr-defined]
    assert serde.from_bytes(expected) == 9.156013e-002  # type: ignore[attr-defined]
    assert serde.to_bytes(-2.5).hex() == "c004000000000000"  # type: ignore[attr-defined]


def test_uuid_serde_factory() -> None:
    serde = samza("UUIDSerdeFactory")
    value = uuid.UUID(int=(13 << 64) | 42)  # new UUID(13, 42)
    expected = bytes([0, 0, 0, 0, 0, 0, 0, 13, 0, 0, 0, 0, 0, 0, 0, 42])  # TestUUIDSerde
    assert serde.to_bytes(value) == expected  # type: ignore[attr-defined]
    assert serde.from_bytes(expected) == value  # type: ignore[attr-defined]
    with pytest.raises(SerdeError, match="16 bytes"):
        serde.from_bytes(b"\x00")  # type: ignore[attr-defined]  # testFromBytesWhenInvalid


def test_string_serde_factory_utf8_and_configured_encoding() -> None:
    assert samza("StringSerdeFactory").to_bytes("foo bar") == b"foo bar"  # type: ignore[attr-defined]
    assert samza("StringSerdeFactory").to_bytes("é€") == "é€".encode()  # type: ignore[attr-defined]
    latin = samza("StringSerdeFactory", encoding="ISO-8859-1")
    assert latin.to_bytes("é") == b"\xe9"  # type: ignore[attr-defined]
    assert latin.from_bytes(b"\xe9") == "é"  # type: ignore[attr-defined]


@pytest.mark.parametrize("factory", ["ByteSerdeFactory", "ByteBufferSerdeFactory"])
def test_byte_serdes_are_raw(factory: str) -> None:
    data = b"A lazy way of creating a byte array"
    serde = samza(factory)
    assert serde.to_bytes(data) == data and serde.from_bytes(data) == data  # type: ignore[attr-defined]
    assert serde.to_bytes(memoryview(data)[1:]) == data[1:]  # type: ignore[attr-defined]


@pytest.mark.parametrize("factory", ["JsonSerdeFactory", "JsonSerdeV2Factory",
                                     "MetricsSnapshotSerdeFactory"])
def test_json_serdes_write_what_jackson_writes(factory: str) -> None:
    serde = samza(factory)
    # Jackson's ObjectMapper: compact, keys in map order, non-ASCII as raw UTF-8.
    value = {"hi": "bye", "why": 2, "list": [1, 2.5, None, True], "name": "Zoë"}
    expected = '{"hi":"bye","why":2,"list":[1,2.5,null,true],"name":"Zoë"}'.encode()
    assert serde.to_bytes(value) == expected  # type: ignore[attr-defined]
    assert serde.from_bytes(expected) == value  # type: ignore[attr-defined]


def test_serializable_serde_is_refused_with_the_reason() -> None:
    with pytest.raises(SerdeError, match="Java object serialization") as info:
        samza("SerializableSerdeFactory")
    assert "job.properties:1" in str(info.value)


# Doubles Java prints in exponent form (>= 1e7 or < 1e-3: Jackson writes Double.toString) and
# control characters (Jackson escapes them in upper-case hex): the spellings docs/samza.md
# says millpond writes differently, and the same values either way.
JACKSON_SPELLINGS = [
    (1e7, b"1.0E7", b"10000000.0"),
    (1.5e-7, b"1.5E-7", b"1.5e-7"),
    (1e300, b"1.0E300", b"1e+300"),
    (-2.5e10, b"-2.5E10", b"-25000000000.0"),
    ("\x1f", b'"\\u001F"', b'"\\u001f"'),
    ("a\x00b", b'"a\\u0000b"', b'"a\\u0000b"'),
]


@pytest.mark.parametrize("factory", ["JsonSerdeFactory", "JsonSerdeV2Factory",
                                     "MetricsSnapshotSerdeFactory"])
@pytest.mark.parametrize(("value", "jackson", "ours"), JACKSON_SPELLINGS)
def test_json_floats_and_control_characters_are_spelled_as_documented(
    factory: str, value: object, jackson: bytes, ours: bytes,
) -> None:
    """``1.0E7`` (Jackson) is written ``10000000.0``, ``\\u001F`` is written ``\\u001f``; each
    side reads the other's spelling as the same value (a Samza job's records decode, and
    millpond's decode in Java as the same double or string)."""
    serde = samza(factory)
    assert serde.to_bytes(value) == ours  # type: ignore[attr-defined]
    assert serde.from_bytes(jackson) == value  # type: ignore[attr-defined]
    assert serde.from_bytes(ours) == value  # type: ignore[attr-defined]
    if isinstance(value, float):
        assert type(serde.from_bytes(ours)) is float  # type: ignore[attr-defined]
        assert float(jackson.decode()) == float(ours.decode()) == value

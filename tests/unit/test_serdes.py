"""Serdes: round trips, error naming, numeric byte order of integer/long, build_serde."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from millpond.config import SerdeSpec
from millpond.serdes import (
    SAMZA_ALIASES,
    AvroSerde,
    BytesSerde,
    DoubleSerde,
    IntegerSerde,
    JsonSerde,
    LongSerde,
    SamzaIntegerSerde,
    SamzaLongSerde,
    Serde,
    SerdeError,
    StringSerde,
    UUIDSerde,
    build_serde,
)

ROUND_TRIPS: list[tuple[Serde[Any], list[Any]]] = [
    (StringSerde(), ["", "hello", "ünïcødé ✓", "a\x00b"]),
    (BytesSerde(), [b"", b"\x00\xff", bytes(range(256))]),
    (JsonSerde(), [None, 1, -2.5, "s", [1, "a", None], {"a": {"b": [True, False]}}, "é"]),
    (IntegerSerde(), [0, 1, -1, 2**31 - 1, -(2**31), 123456]),
    (LongSerde(), [0, 1, -1, 2**63 - 1, -(2**63), 10**15]),
    (DoubleSerde(), [0.0, -0.0, 1.5, -1e300, math.inf, -math.inf, 3]),
]

RECORD_SCHEMA = {
    "type": "record",
    "name": "PageView",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


@pytest.mark.parametrize(
    ("serde", "value"),
    [(serde, value) for serde, values in ROUND_TRIPS for value in values],
    ids=lambda x: x.name if isinstance(x, Serde) else repr(x)[:20],
)
def test_round_trip(serde: Serde[Any], value: Any) -> None:
    data = serde.to_bytes(value)
    assert isinstance(data, bytes)
    assert serde.from_bytes(data) == value


def test_string_serde_is_utf8_and_honours_encoding() -> None:
    assert StringSerde().to_bytes("é") == "é".encode()
    latin = StringSerde(encoding="latin-1")
    assert latin.to_bytes("é") == b"\xe9"
    assert latin.from_bytes(b"\xe9") == "é"
    with pytest.raises(SerdeError, match="unknown encoding"):
        StringSerde(encoding="no-such-codec")


def test_bytes_serde_copies_buffers() -> None:
    serde = BytesSerde()
    raw = b"abc"
    assert serde.to_bytes(raw) is raw
    assert serde.to_bytes(bytearray(b"xy")) == b"xy"
    assert serde.to_bytes(memoryview(b"mv")) == b"mv"


def test_json_is_compact_utf8() -> None:
    assert JsonSerde().to_bytes({"a": [1, 2], "b": "é"}) == '{"a":[1,2],"b":"é"}'.encode()


def test_json_writes_non_str_dict_keys_as_strings_as_the_stdlib_does() -> None:
    """orjson refuses them without OPT_NON_STR_KEYS; the serde retries with it."""
    serde = JsonSerde()
    obj = {1: "a", "b": {2: [None, 1.5]}, 3.5: True}
    assert serde.to_bytes(obj) == json.dumps(obj, separators=(",", ":")).encode()
    assert serde.from_bytes(serde.to_bytes({1: 2})) == {"1": 2}
    with pytest.raises(SerdeError, match="NaN/Infinity"):
        serde.to_bytes({1: {"x": math.inf}})


@pytest.mark.parametrize(
    ("serde", "values"),
    [
        (IntegerSerde(), [-(2**31), -65536, -257, -256, -1, 0, 1, 255, 256, 2**31 - 1]),
        (LongSerde(), [-(2**63), -(2**40), -1, 0, 1, 2**32, 2**63 - 1]),
    ],
    ids=["integer", "long"],
)
def test_integer_and_long_sort_numerically_as_unsigned_bytes(
    serde: Serde[int], values: list[int]
) -> None:
    encoded = [serde.to_bytes(v) for v in values]
    assert sorted(encoded) == encoded
    assert {len(e) for e in encoded} == {4 if isinstance(serde, IntegerSerde) else 8}


def test_integer_encoding_flips_the_sign_bit_big_endian() -> None:
    assert IntegerSerde().to_bytes(0) == b"\x80\x00\x00\x00"
    assert IntegerSerde().to_bytes(-1) == b"\x7f\xff\xff\xff"
    assert LongSerde().to_bytes(1) == b"\x80\x00\x00\x00\x00\x00\x00\x01"


def test_double_keeps_samza_wire_format() -> None:
    assert DoubleSerde().to_bytes(1.0) == b"\x3f\xf0\x00\x00\x00\x00\x00\x00"


BAD_VALUES: list[tuple[Serde[Any], Any, str]] = [
    (StringSerde(name="names"), 12, "cannot serialize int"),
    (StringSerde(name="names"), "\ud800", "cannot serialize"),
    (BytesSerde(name="raw"), "text", "expected bytes"),
    (JsonSerde(name="events"), {"s": {1, 2}}, "cannot serialize"),
    (JsonSerde(name="events"), math.nan, "cannot serialize"),
    (IntegerSerde(name="ids"), 2**31, "outside the signed 32-bit range"),
    (IntegerSerde(name="ids"), "1", "expected int"),
    (IntegerSerde(name="ids"), True, "expected int"),
    (IntegerSerde(name="ids"), 1.0, "expected int"),
    (LongSerde(name="ids"), -(2**63) - 1, "outside the signed 64-bit range"),
    (DoubleSerde(name="d"), "1.0", "expected float"),
]


@pytest.mark.parametrize(("serde", "value", "message"), BAD_VALUES)
def test_serialize_errors_name_the_serde(serde: Serde[Any], value: Any, message: str) -> None:
    with pytest.raises(SerdeError, match=message) as info:
        serde.to_bytes(value)
    assert info.value.serde == serde.name
    assert f"serde {serde.name!r}" in str(info.value)


BAD_DATA: list[tuple[Serde[Any], bytes]] = [
    (StringSerde(name="names"), b"\xff\xfe"),
    (JsonSerde(name="events"), b"{not json"),
    (IntegerSerde(name="ids"), b"\x00\x01"),
    (LongSerde(name="ids"), b"\x00" * 4),
    (DoubleSerde(name="d"), b"\x00"),
]


@pytest.mark.parametrize(("serde", "data"), BAD_DATA)
def test_deserialize_errors_name_the_serde(serde: Serde[Any], data: bytes) -> None:
    with pytest.raises(SerdeError, match="cannot deserialize") as info:
        serde.from_bytes(data)
    assert f"serde {serde.name!r}" in str(info.value)


def test_serde_error_renders_store_and_location() -> None:
    err = SerdeError("ids", "bad value", location="job.properties:7")
    assert str(err) == "job.properties:7: serde 'ids': bad value"
    assert err.add_store("counts") is err
    err.add_store("other")  # the first store name sticks
    assert str(err) == "job.properties:7: store 'counts': serde 'ids': bad value"


# -- avro --------------------------------------------------------------------------------------


def test_avro_round_trip_with_inline_schema() -> None:
    serde = AvroSerde(json.dumps(RECORD_SCHEMA), name="views")
    record = {"user": "ann", "count": 3, "tags": ["a", "b"]}
    data = serde.to_bytes(record)
    assert serde.from_bytes(data) == record
    assert data[:1] != b"\x4f"  # schemaless: no "Obj" container header


def test_avro_schema_from_avsc_path(tmp_path: Path) -> None:
    avsc = tmp_path / "view.avsc"
    avsc.write_text(json.dumps(RECORD_SCHEMA))
    serde = AvroSerde(str(avsc))
    record = {"user": "bob", "count": -1, "tags": []}
    assert serde.from_bytes(serde.to_bytes(record)) == record


def test_avro_relative_path_resolves_against_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "v.avsc").write_text(json.dumps(RECORD_SCHEMA))
    spec = SerdeSpec(
        name="views",
        factory="avro",
        params={"schema": "schemas/v.avsc"},
        location=f"{tmp_path / 'job.properties'}:4",
    )
    serde = build_serde(spec)
    assert serde.from_bytes(serde.to_bytes({"user": "c", "count": 1, "tags": ["x"]}))["user"] == "c"


def test_avro_errors_name_the_serde(tmp_path: Path) -> None:
    serde = AvroSerde(RECORD_SCHEMA, name="views")
    with pytest.raises(SerdeError, match="serde 'views': cannot serialize"):
        serde.to_bytes({"user": "x"})
    with pytest.raises(SerdeError, match="serde 'views': cannot deserialize"):
        serde.from_bytes(b"\x06an")
    with pytest.raises(SerdeError, match="trailing bytes"):
        serde.from_bytes(serde.to_bytes({"user": "u", "count": 1, "tags": []}) + b"\x00")
    with pytest.raises(SerdeError, match="schema file not found"):
        AvroSerde(str(tmp_path / "missing.avsc"), name="views")
    with pytest.raises(SerdeError, match="not valid JSON"):
        AvroSerde("{broken", name="views")
    with pytest.raises(SerdeError, match="invalid Avro schema"):
        AvroSerde({"type": "record", "name": "R", "fields": [{"name": "f", "type": "nope"}]})


# -- build_serde -------------------------------------------------------------------------------


def spec(factory: str, name: str = "s", **params: str) -> SerdeSpec:
    return SerdeSpec(name=name, factory=factory, params=params, location="job.properties:12")


@pytest.mark.parametrize(
    ("factory", "cls"),
    [
        ("string", StringSerde),
        ("json", JsonSerde),
        ("integer", IntegerSerde),
        ("long", LongSerde),
        ("double", DoubleSerde),
        ("bytes", BytesSerde),
    ],
)
def test_build_serde_short_names(factory: str, cls: type) -> None:
    serde = build_serde(spec(factory, name="my-" + factory))
    assert isinstance(serde, cls)
    assert serde.name == "my-" + factory


@pytest.mark.parametrize(
    ("samza_class", "cls"),
    [
        ("org.apache.samza.serializers.StringSerdeFactory", StringSerde),
        ("org.apache.samza.serializers.JsonSerdeFactory", JsonSerde),
        # Samza's two's complement layout, not millpond's order-preserving integer/long
        ("org.apache.samza.serializers.IntegerSerdeFactory", SamzaIntegerSerde),
        ("org.apache.samza.serializers.LongSerdeFactory", SamzaLongSerde),
        ("org.apache.samza.serializers.ByteBufferSerdeFactory", BytesSerde),
        ("org.apache.samza.serializers.UUIDSerdeFactory", UUIDSerde),
        ("org.apache.samza.serializers.DoubleSerdeFactory", DoubleSerde),
        ("org.apache.samza.serializers.ByteSerdeFactory", BytesSerde),
        ("org.apache.samza.serializers.BytesSerdeFactory", BytesSerde),
    ],
)
def test_build_serde_samza_aliases(samza_class: str, cls: type) -> None:
    assert samza_class in SAMZA_ALIASES
    assert isinstance(build_serde(spec(samza_class)), cls)


def test_build_serde_string_encoding_param() -> None:
    serde = build_serde(spec("org.apache.samza.serializers.StringSerdeFactory", encoding="latin-1"))
    assert serde.to_bytes("é") == b"\xe9"


def test_build_serde_avro_needs_a_schema() -> None:
    with pytest.raises(SerdeError, match=r"job.properties:12: .*serializers.registry.v.schema"):
        build_serde(spec("avro", name="v"))
    serde = build_serde(spec("avro", name="v", schema=json.dumps(RECORD_SCHEMA)))
    assert isinstance(serde, AvroSerde)


class UpperSerde(Serde[str]):
    """A user serde taking a parameter."""

    name = "upper"

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix

    def to_bytes(self, obj: str) -> bytes:
        return (obj.upper() + self.suffix).encode()

    def from_bytes(self, data: bytes) -> str:
        return data.decode()


class PlainSerde:
    """Duck-typed serde without a name and with a no-argument constructor."""

    def to_bytes(self, obj: str) -> bytes:
        return obj.encode()

    def from_bytes(self, data: bytes) -> str:
        return data.decode()


PLAIN_INSTANCE = PlainSerde()
NOT_A_SERDE = ["not", "a", "serde"]


def dotted(name: str) -> str:
    return f"{__name__}.{name}"


def test_build_serde_dotted_path_passes_accepted_params() -> None:
    serde = build_serde(spec(dotted("UpperSerde"), suffix="!"))
    assert isinstance(serde, UpperSerde)
    assert serde.to_bytes("hi") == b"HI!"


def test_build_serde_dotted_path_without_accepted_params_calls_with_no_args() -> None:
    serde = build_serde(spec(dotted("PlainSerde"), name="plain", unknown="x"))
    assert isinstance(serde, PlainSerde)
    assert serde.name == "plain"
    assert build_serde(spec(dotted("UpperSerde"), other="y")).to_bytes("a") == b"A"


def test_build_serde_dotted_path_to_an_instance() -> None:
    assert build_serde(spec(dotted("PLAIN_INSTANCE"))) is PLAIN_INSTANCE


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("strnig", "unknown serde factory 'strnig'"),
        ("org.apache.samza.serializers.SerializableSerdeFactory", "not supported: Java"),
        ("no_such_module_xyz.Serde", "cannot import 'no_such_module_xyz.Serde'"),
        (dotted("Missing"), "cannot import"),
        (dotted("NOT_A_SERDE"), "did not give a serde"),
    ],
)
def test_build_serde_failures_name_the_location(factory: str, message: str) -> None:
    with pytest.raises(SerdeError, match=message) as info:
        build_serde(spec(factory, name="bad"))
    assert info.value.location == "job.properties:12"
    assert str(info.value).startswith("job.properties:12: serde 'bad': ")

"""Decoding changelog bytes in Spark agrees with the store's Python serdes (no broker needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from millpond.config import Config, parse_properties
from millpond.serdes import build_serde
from millpond.spark.decode import StoreSerdes, decode, store_serdes, structure_values

pytestmark = pytest.mark.spark


def serdes_for(key: str, msg: str, extra: str = "") -> StoreSerdes:
    config = Config.from_properties(parse_properties(
        f"job.name=j\nstores.s.factory=rocksdb\nstores.s.key.serde={key}\n"
        f"stores.s.msg.serde={msg}\n{extra}"))
    return store_serdes(config, "s")


def frame(spark: Any, pairs: list[tuple[bytes, bytes | None]]) -> Any:
    rows = [(0, i, None, bytearray(k), bytearray(v) if v is not None else None)
            for i, (k, v) in enumerate(pairs)]
    return spark.createDataFrame(
        rows, "partition INT, offset BIGINT, timestamp TIMESTAMP, key_bytes BINARY, "
              "value_bytes BINARY")


@pytest.mark.parametrize("key, msg, keys, values", [
    ("long", "integer", [0, 1, -1, 2**63 - 1, -(2**63)], [0, 7, -7, 2**31 - 1, -(2**31)]),
    ("string", "double", ["", "a", "é€😀", "x" * 300, "k"], [0.0, -1.5, 1e300, 2.5, -0.0]),
    ("bytes", "string", [b"\x00", b"\xff\xfe", b"", b"k", b"z"], ["v", "ü", "", "x", "y"]),
])
def test_scalar_columns_decode_like_the_python_serdes(
    spark: Any, key: str, msg: str, keys: list[Any], values: list[Any]
) -> None:
    serdes = serdes_for(key, msg)
    k_serde, v_serde = build_serde(serdes.key_spec), build_serde(serdes.msg_spec)
    pairs = [(k_serde.to_bytes(k), v_serde.to_bytes(v)) for k, v in zip(keys, values, strict=True)]

    rows = decode(frame(spark, pairs), serdes).orderBy("offset").collect()

    assert [r["key"] if key != "bytes" else bytes(r["key"]) for r in rows] == keys
    assert [r["value"] for r in rows] == values
    assert all(r["value_json"] is None for r in rows)


def test_json_objects_become_a_struct_and_keep_their_text(spark: Any, tmp_path: Path) -> None:
    serdes = serdes_for("integer", "json")
    docs = [{"a": 1, "b": "x", "c": [1, 2]}, {"a": 2, "d": {"e": 1.5}, "VOID": None},
            {"a": 3, "b": None, "f": []}]
    pairs = [(build_serde(serdes.key_spec).to_bytes(i), json.dumps(d).encode())
             for i, d in enumerate(docs)]

    structure_values(decode(frame(spark, pairs), serdes), serdes).write.parquet(str(tmp_path / "p"))
    df = spark.read.parquet(str(tmp_path / "p"))  # null-only and empty-array fields: strings

    assert dict(df.dtypes)["value"].startswith("struct<")
    rows = df.orderBy("key").collect()
    assert [json.loads(r["value_json"]) for r in rows] == docs
    assert [r["value"]["a"] for r in rows] == [1, 2, 3]
    assert rows[1]["value"]["d"]["e"] == 1.5


def test_mixed_json_values_stay_json_text(spark: Any) -> None:
    serdes = serdes_for("string", "json")
    pairs = [(b"a", b'{"x":1}'), (b"b", b"[1,2]"), (b"c", b'"s"')]

    df = structure_values(decode(frame(spark, pairs), serdes), serdes)

    assert dict(df.dtypes)["value"] == "string"
    assert [r["value"] for r in df.orderBy("key").collect()] == ['{"x":1}', "[1,2]", '"s"']


def test_avro_values_decode_through_the_python_serde_to_a_struct(spark: Any) -> None:
    schema = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "n", "type": "long"}, {"name": "tag", "type": "string"}]})
    serdes = serdes_for("string", "rec", f"serializers.registry.rec.class=avro\n"
                                         f"serializers.registry.rec.schema={schema}\n")
    avro = build_serde(serdes.msg_spec)
    pairs = [(b"a", avro.to_bytes({"n": 1, "tag": "x"})), (b"b", avro.to_bytes({"n": 2, "tag": "y"}))]

    rows = structure_values(decode(frame(spark, pairs), serdes), serdes).orderBy("key").collect()

    assert [(r["value"]["n"], r["value"]["tag"]) for r in rows] == [(1, "x"), (2, "y")]


@pytest.mark.parametrize("key, msg, pair, problem", [
    ("string", "json", (b"ok", b"{not json"), "cannot decode value with serde 'json'"),
    ("string", "json", (b"\xff", b"{}"), "cannot decode key with serde 'string'"),
    ("long", "json", (b"\x01", b"{}"), "cannot decode key with serde 'long'"),
    ("string", "double", (b"k", b"\x01"), "cannot decode value with serde 'double'"),
])
def test_undecodable_records_fail_naming_store_partition_and_offset(
    spark: Any, key: str, msg: str, pair: tuple[bytes, bytes], problem: str
) -> None:
    serdes = serdes_for(key, msg)
    with pytest.raises(Exception) as info:
        decode(frame(spark, [pair]), serdes).collect()
    assert problem in str(info.value)
    assert "store 's' partition 0 offset 0" in str(info.value)

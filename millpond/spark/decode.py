"""Decode changelog bytes with the store's serdes into typed Spark columns.

Built-in scalar serdes map to Spark types (string, integer, long, double, bytes). JSON, Avro
and custom serdes become a JSON text column (``value_json`` for values); when every value is
a JSON object, ``value`` becomes a struct whose schema is inferred from the data (Spark's
VARIANT schema aggregation), otherwise it stays the JSON text. The raw ``key_bytes`` and
``value_bytes`` are always kept, so nothing is lost to decoding.

Built-in string (UTF-8), json, integer, long and bytes serdes decode as Spark SQL expressions
in the JVM; every other serde runs in a Python UDF that builds the serde from its config spec
inside each worker (specs pickle; serde objects need not).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from millpond.errors import RUNTIME_FAILURE
from millpond.serdes import SAMZA_ALIASES
from millpond.spark.errors import SparkJobError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

    from millpond.config import Config, SerdeSpec

SCALAR_KINDS = ("string", "integer", "long", "double", "bytes")
JSON_KIND = "json"  # anything decoded to JSON text: json, avro, custom serdes

OUTPUT_COLUMNS = ("store", "partition", "key", "value", "value_json", "offset", "timestamp",
                  "key_bytes", "value_bytes")


def serde_kind(spec: SerdeSpec) -> str:
    """``string``/``integer``/``long``/``double``/``bytes`` for built-in scalars, else ``json``."""
    factory = SAMZA_ALIASES.get(spec.factory.strip(), spec.factory.strip())
    factory = _SAMZA_LAYOUT_KINDS.get(factory, factory)
    return factory if factory in SCALAR_KINDS else JSON_KIND


# Samza's two's complement integer/long: the same column types, decoded by the Python serde.
_SAMZA_LAYOUT_KINDS = {"samza-integer": "integer", "samza-long": "long"}


@dataclass(frozen=True)
class StoreSerdes:
    """The serde specs of one store and the column kind each decodes to."""

    store: str
    key_spec: SerdeSpec
    msg_spec: SerdeSpec

    @property
    def key_kind(self) -> str:
        return serde_kind(self.key_spec)

    @property
    def value_kind(self) -> str:
        return serde_kind(self.msg_spec)


def store_serdes(config: Config, store: str) -> StoreSerdes:
    """Resolve the key and message serde specs of ``store`` (ConfigError if unknown)."""
    cfg = config.stores[store]
    return StoreSerdes(
        store,
        config.serde_spec(cfg.key_serde, f"stores.{store}.key.serde"),
        config.serde_spec(cfg.msg_serde, f"stores.{store}.msg.serde"),
    )


def spark_type(kind: str) -> DataType:
    """The Spark type a decoded column of ``kind`` has (JSON kinds: JSON text)."""
    from pyspark.sql.types import BinaryType, DoubleType, IntegerType, LongType, StringType

    types: dict[str, DataType] = {
        "string": StringType(), "integer": IntegerType(), "long": LongType(),
        "double": DoubleType(), "bytes": BinaryType(),
    }
    return types.get(kind, StringType())


def _json_default(obj: Any) -> Any:
    """JSON for what Avro and custom serdes return beyond plain JSON types."""
    if isinstance(obj, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(obj)).decode()
    if isinstance(obj, datetime.datetime | datetime.date | datetime.time):
        return obj.isoformat()
    if isinstance(obj, decimal.Decimal):
        return float(obj)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    return str(obj)


def to_json(obj: Any) -> str:
    """Compact JSON text of a decoded object."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=_json_default)


class DecodeError(SparkJobError):
    """A changelog record the store's serde cannot decode (raised inside Spark workers)."""

    exit_code = RUNTIME_FAILURE  # damaged data, as for a restore


def make_decoder(spec: SerdeSpec, kind: str, what: str, store: str) -> Callable[..., Any]:
    """A picklable function (partition, offset, bytes) -> decoded ``what`` (key or value)."""
    as_json = kind == JSON_KIND
    built: list[Any] = []

    def decode_one(partition: int, offset: int, data: bytes | None) -> Any:
        if data is None:
            return None
        if not built:
            from millpond.serdes import build_serde

            built.append(build_serde(spec))
        try:
            obj = built[0].from_bytes(bytes(data))
        except Exception as exc:
            raise DecodeError(
                f"store {store!r} partition {partition} offset {offset}: cannot decode "
                f"{what} with serde {spec.name!r}: {exc}"
            ) from exc
        return to_json(obj) if as_json else obj

    return decode_one


def _utf8_spec(spec: SerdeSpec) -> bool:
    import codecs

    try:
        return codecs.lookup(spec.params.get("encoding", "utf-8")).name == "utf-8"
    except LookupError:
        return False


def native_decoder(spec: SerdeSpec, kind: str, column: str, what: str, store: str) -> Any:
    """A Spark SQL expression decoding ``column`` like the built-in serde would, or None.

    Built-in string (UTF-8), json, integer, long and bytes serdes decode in the JVM, much
    faster than a Python UDF; invalid data fails the job as the serde would.
    """
    from pyspark.sql import functions as F

    data = F.col(column)

    def fail(problem: str) -> Any:
        return F.raise_error(F.format_string(
            f"store {store!r} partition %d offset %d: cannot decode {what} with serde "
            f"{spec.name!r}: {problem}", F.col("partition"), F.col("offset")))

    factory = SAMZA_ALIASES.get(spec.factory.strip(), spec.factory.strip())
    if factory in _SAMZA_LAYOUT_KINDS:
        return None  # two's complement: the Python serde decodes it (make_decoder)
    if kind == "bytes":
        return data
    if kind == "string" and _utf8_spec(spec):
        return F.when(F.is_valid_utf8(data) | data.isNull(), data.cast("string")).otherwise(
            fail("not valid UTF-8"))
    if kind == JSON_KIND and factory == "json":
        text = data.cast("string")
        valid = data.isNull() | (F.is_valid_utf8(data) & F.try_parse_json(text).isNotNull())
        return F.when(valid, text).otherwise(fail("not valid UTF-8 JSON"))
    if kind in ("integer", "long"):
        size, bias = (4, 1 << 31) if kind == "integer" else (8, 1 << 63)
        unsigned = F.conv(F.hex(data), 16, 10).cast("decimal(20,0)")
        number = (unsigned - F.lit(str(bias)).cast("decimal(20,0)")).cast(
            "int" if kind == "integer" else "bigint")
        return F.when(data.isNull(), F.lit(None)).when(F.octet_length(data) == size, number) \
            .otherwise(fail(f"need {size} bytes"))
    return None


def _decoded(serdes: StoreSerdes, side: str, column: str) -> Any:
    from pyspark.sql import functions as F

    spec, kind = ((serdes.key_spec, serdes.key_kind) if side == "key"
                  else (serdes.msg_spec, serdes.value_kind))
    native = native_decoder(spec, kind, column, side, serdes.store)
    if native is not None:
        return native
    udf = F.udf(make_decoder(spec, kind, side, serdes.store), spark_type(kind), useArrow=False)
    return udf("partition", "offset", column)


def decode(df: DataFrame, serdes: StoreSerdes) -> DataFrame:
    """Add decoded columns to ``df`` (partition, offset, timestamp, key_bytes, value_bytes).

    Result columns: :data:`OUTPUT_COLUMNS`, with ``value`` still JSON text for JSON kinds
    (see :func:`structure_values`) and ``value_json`` null for scalar kinds.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    decoded = df.select(
        "*",
        _decoded(serdes, "key", "key_bytes").alias("_k"),
        _decoded(serdes, "value", "value_bytes").alias("_v"),
    )
    is_json = serdes.value_kind == JSON_KIND
    return decoded.select(
        F.lit(serdes.store).alias("store"),
        "partition",
        F.col("_k").alias("key"),
        F.col("_v").alias("value"),
        (F.col("_v") if is_json else F.lit(None).cast(StringType())).alias("value_json"),
        "offset",
        "timestamp",
        "key_bytes",
        "value_bytes",
    )


def infer_struct(df: DataFrame, column: str = "value_json") -> StructType | None:
    """A struct type fitting every JSON text in ``column``; None if they are not all objects
    (or there are none, or field names are empty or clash case-insensitively).

    Numbers become BIGINT or DOUBLE, fields of mixed types and nulls-only fields STRING
    (holding their JSON text).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, _parse_datatype_string

    row = df.select(F.schema_of_variant_agg(F.parse_json(F.col(column)))).first()
    schema = row[0] if row else None
    if not schema or not schema.startswith("OBJECT<") or schema == "OBJECT<>":
        return None
    try:
        parsed = _parse_datatype_string(_objects_as_structs(schema))
    except Exception:
        return None
    if not isinstance(parsed, StructType) or _bad_names(parsed):
        return None
    result = _parquet_friendly(parsed)
    assert isinstance(result, StructType)
    return result


def _objects_as_structs(schema: str) -> str:
    """Variant schema text -> Spark DDL: OBJECT<...> becomes STRUCT<...> outside `names`."""
    out, i, quoted = [], 0, False
    while i < len(schema):
        ch = schema[i]
        if ch == "`":
            quoted = not quoted
        if not quoted and schema.startswith("OBJECT<", i):
            out.append("STRUCT<")
            i += len("OBJECT<")
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _parquet_friendly(dtype: DataType) -> DataType:
    """Decimals -> double (JSON numbers), variant and void (mixed, all-null) -> string."""
    from pyspark.sql.types import (
        ArrayType,
        DecimalType,
        DoubleType,
        MapType,
        NullType,
        StringType,
        StructField,
        StructType,
        VariantType,
    )

    if isinstance(dtype, StructType):
        return StructType([StructField(f.name, _parquet_friendly(f.dataType)) for f in dtype.fields])
    if isinstance(dtype, ArrayType):
        return ArrayType(_parquet_friendly(dtype.elementType))
    if isinstance(dtype, MapType):
        return MapType(dtype.keyType, _parquet_friendly(dtype.valueType))
    if isinstance(dtype, DecimalType):
        return DoubleType()
    if isinstance(dtype, VariantType | NullType):
        return StringType()
    return dtype


def _bad_names(struct: Any) -> bool:
    """True if field names are empty or repeat case-insensitively (Parquet would refuse)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(struct, StructType):
        names = [f.name.lower() for f in struct.fields]
        return (len(names) != len(set(names)) or "" in names
                or any(_bad_names(f.dataType) for f in struct.fields))
    if isinstance(struct, ArrayType):
        return _bad_names(struct.elementType)
    if isinstance(struct, MapType):
        return _bad_names(struct.valueType)
    return False


def structure_values(df: DataFrame, serdes: StoreSerdes) -> DataFrame:
    """Turn ``value`` into a struct when the store's values are JSON objects (else unchanged).

    Reads ``df`` once to infer the schema: persist it first if it is expensive to compute.
    """
    from pyspark.sql import functions as F

    if serdes.value_kind != JSON_KIND:
        return df
    schema = infer_struct(df)
    if schema is None:
        return df
    return df.withColumn("value", F.from_json(F.col("value_json"), schema))

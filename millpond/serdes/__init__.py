"""millpond.serdes: turn keys and values into bytes and back.

Built-ins (string, json, integer, long, double, bytes, uuid, avro, and Samza's two's
complement integer/long under Samza's class names), the Serde interface, SerdeError,
and ``build_serde(spec)`` which builds a serde from a config ``SerdeSpec``.
"""

from millpond.serdes.api import Serde
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
from millpond.serdes.errors import SerdeError
from millpond.serdes.factory import BUILTINS, SAMZA_ALIASES, SerdeSpecLike, build_serde, serdes_for

__all__ = [
    "AvroSerde",
    "BUILTINS",
    "BytesSerde",
    "DoubleSerde",
    "IntegerSerde",
    "JsonSerde",
    "LongSerde",
    "SAMZA_ALIASES",
    "SamzaIntegerSerde",
    "SamzaLongSerde",
    "Serde",
    "SerdeError",
    "SerdeSpecLike",
    "StringSerde",
    "UUIDSerde",
    "build_serde",
    "serdes_for",
]

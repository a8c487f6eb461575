"""Pure-Python parts of ``millpond spark rescale``: key placement and --key-fn. No JVM."""

from __future__ import annotations

import pytest
from pyspark import cloudpickle

from millpond.config import SerdeSpec
from millpond.partitioner import partition_of
from millpond.spark.errors import RescaleError
from millpond.spark.rescale import RescaleResult, StoreRescale, load_key_fn, make_placer

STRING = SerdeSpec("string", "string")


def user_of(key: str) -> str:
    """A --key-fn for stores keyed ``hour|user``: the input is keyed by user."""
    return key.split("|", 1)[1]


def int_of(key: str) -> int:
    return int(key)


def test_without_key_fn_the_store_key_bytes_are_the_input_key() -> None:
    place = cloudpickle.loads(cloudpickle.dumps(make_placer(STRING, None, 8, "murmur2", "counts")))
    for user in (f"user-{i}" for i in range(200)):
        assert place(user.encode()) == partition_of(user.encode(), 8, "murmur2")
    crc = make_placer(STRING, None, 12, "consistent_random", "counts")
    assert crc(b"user-7") == partition_of(b"user-7", 12, "consistent_random")


def test_key_fn_maps_a_composite_key_to_its_input_key() -> None:
    place = make_placer(STRING, f"{__name__}:user_of", 8, "murmur2", "hourly")
    for i in range(100):
        user = f"user-{i}"
        expected = partition_of(user.encode(), 8, "murmur2")
        assert place(f"2026-11-23T0{i % 10}|{user}".encode()) == expected
    # A non-str, non-bytes result is serialized with the store's key serde.
    ints = make_placer(STRING, f"{__name__}:int_of", 8, "murmur2", "hourly")
    with pytest.raises(RescaleError, match=r"returned 12 for key b'12', which the store's key "
                       "serde cannot serialize"):
        ints(b"12")  # the string serde refuses an int: a precise error, not a wrong partition


def test_key_fn_errors_are_precise() -> None:
    with pytest.raises(RescaleError, match="expected module:function"):
        load_key_fn("no_colon")
    with pytest.raises(RescaleError, match="cannot import it"):
        load_key_fn("tests.spark.test_rescale_units:missing")
    with pytest.raises(RescaleError, match="cannot import it"):
        load_key_fn("no.such.module:fn")
    place = make_placer(STRING, f"{__name__}:user_of", 8, "murmur2", "hourly")
    with pytest.raises(RescaleError, match=r"store 'hourly': --key-fn .*user_of failed on key "
                       r"b'no-bar'"):
        place(b"no-bar")


def test_report_is_json_shaped() -> None:
    result = RescaleResult("wc", 4, 8, None, 1.23456,
                           {"counts": StoreRescale("t", "t-gen2", 3, {0: 2, 5: 1},
                                                   {p: -1 for p in range(8)})})
    doc = result.to_dict()
    assert doc["seconds"] == 1.235 and doc["stores"]["counts"]["partitions"] == {"0": 2, "5": 1}
    assert list(doc["stores"]["counts"]["checkpoint"]) == [str(p) for p in range(8)]

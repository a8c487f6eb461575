"""The worker-side encoder of ``millpond spark bootstrap``, without Spark or Kafka."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from millpond.config import SerdeSpec
from millpond.partitioner import partition_of
from millpond.spark.encode import make_encoder, plain
from millpond.spark.errors import BootstrapError


class FakeRow(tuple):  # what Spark hands a worker for a struct column
    def asDict(self) -> dict[str, object]:  # noqa: N802 - Spark's name
        return {"city": self[0], "tags": self[1]}


def spec(name: str) -> SerdeSpec:
    return SerdeSpec(name, name)


def test_one_value_column_is_the_value_and_keys_go_where_the_partitioner_says() -> None:
    encode = make_encoder(spec("string"), spec("json"), ["views"], 12, "murmur2", "counts")
    for i in range(200):
        partition, key, value = encode(f"user-{i}", (i,))
        assert key == f"user-{i}".encode() and json.loads(value) == i
        assert partition == partition_of(key, 12, "murmur2")
    other = make_encoder(spec("string"), spec("json"), ["views"], 12, "consistent_random", "c")
    moved = sum(other(f"user-{i}", (i,))[0] != encode(f"user-{i}", (i,))[0] for i in range(200))
    assert moved > 100  # the two partitioners really differ


def test_several_value_columns_make_a_record_with_nested_rows_as_dicts() -> None:
    encode = make_encoder(spec("string"), spec("json"), ["name", "address", "score"], 4,
                          "murmur2", "profiles")
    _, _, value = encode("alice", ("Alice", FakeRow(("Paris", ["a", "b"])), 1.5))
    assert json.loads(value) == {"name": "Alice", "address": {"city": "Paris", "tags": ["a", "b"]},
                                 "score": 1.5}
    assert plain(bytearray(b"x")) == b"x"


@pytest.mark.parametrize(("key", "values", "needle"), [
    (None, (1,), "null key"),
    ("bob", (None,), "null value"),
    ("bob", (float("nan"),), "does not serialize with the store's msg serde"),
])
def test_rows_that_cannot_be_stored_are_refused_naming_the_key(
    key: object, values: tuple[object, ...], needle: str,
) -> None:
    encode = make_encoder(spec("string"), spec("json"), ["views"], 4, "murmur2", "counts")
    with pytest.raises(BootstrapError, match=needle) as refused:
        encode(key, values)
    assert "store 'counts'" in str(refused.value)


@pytest.mark.kafka
def test_the_writer_surfaces_a_record_kafka_refuses(
    kafka_bootstrap: str, topic_name: Callable[[str], str],
) -> None:
    """A delivery error fails the Spark task (so the run) instead of being dropped."""
    from millpond.spark.encode import make_writer
    from tests.kafka_util import create_topic, read_topic

    topic = topic_name("changelog")
    create_topic(kafka_bootstrap, topic, 2, **{"cleanup.policy": "compact"})
    write = make_writer({"bootstrap.servers": kafka_bootstrap}, topic, timeout=30)
    done = list(write([(0, b"a", b"1"), (1, b"b", b"2"), (1, b"c", None)]))
    assert done == [(0, 1, 0, 0), (1, 2, 1, 1)]
    assert len(read_topic(kafka_bootstrap, topic)) == 3
    with pytest.raises(BootstrapError, match=f"writing changelog {topic}"):
        list(write([(0, b"d", b"4"), (1, b"big", b"x" * 2_000_000)]))


def test_several_value_columns_make_an_avro_record() -> None:
    from millpond.serdes import build_serde

    schema = json.dumps({"type": "record", "name": "Profile", "fields": [
        {"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
    avro = SerdeSpec("profile", "avro", {"schema": schema})
    encode = make_encoder(spec("string"), avro, ["name", "age"], 8, "murmur2", "profiles")
    _, _, value = encode("u1", ("Ann", 41))
    assert build_serde(avro).from_bytes(value) == {"name": "Ann", "age": 41}
    with pytest.raises(BootstrapError, match="does not serialize with the store's msg serde"):
        encode("u2", ("Bob", "not an int"))

"""Source rows -> changelog records, and records -> Kafka, as Spark workers run them.

The functions here run inside Spark's Python workers, so they take only picklable inputs
(serde specs, a producer config) and build serdes and producers there. They are plain Python
and unit-testable without Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from millpond.partitioner import partition_of
from millpond.spark.errors import BootstrapError

if TYPE_CHECKING:
    from millpond.config import SerdeSpec

# One serialized record: (partition, key bytes, value bytes or None for a tombstone).
Record = tuple[int, bytes, bytes | None]


def plain(value: Any) -> Any:
    """A Spark value as the plain Python a serde takes: Rows become dicts, recursively."""
    as_dict = getattr(value, "asDict", None)
    if callable(as_dict):
        return {k: plain(v) for k, v in as_dict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def make_encoder(
    key_spec: SerdeSpec, msg_spec: SerdeSpec, value_columns: Sequence[str], partitions: int,
    partitioner: str, store: str,
) -> Callable[[Any, Any], Record]:
    """A picklable function (key, values) -> (partition, key bytes, value bytes).

    One value column gives that column's value; several give a record (dict) keyed by the
    column names, for the store's msg serde (JSON, Avro). Keys go to
    ``partition_of(key bytes, partitions, partitioner)``: where the job's producers put them.
    """
    columns = list(value_columns)
    built: list[Any] = []

    def encode(key: Any, values: Sequence[Any]) -> Record:
        if not built:
            from millpond.serdes import build_serde

            built.extend((build_serde(key_spec), build_serde(msg_spec)))
        key_serde, msg_serde = built
        if key is None:
            raise BootstrapError(f"store {store!r}: a source row has a null key (values "
                                 f"{_short(values)}); a store key must not be null")
        obj = plain(values[0]) if len(columns) == 1 else {
            c: plain(v) for c, v in zip(columns, values, strict=True)}
        if obj is None:
            raise BootstrapError(f"store {store!r}: key {_short(key)} has a null value; a "
                                 "store value must not be null (leave the row out instead)")
        try:
            key_bytes = key_serde.to_bytes(plain(key))
        except Exception as exc:
            raise BootstrapError(f"store {store!r}: key {_short(key)} does not serialize "
                                 f"with the store's key serde: {exc}") from exc
        try:
            value_bytes = msg_serde.to_bytes(obj)
        except Exception as exc:
            raise BootstrapError(f"store {store!r}: the value of key {_short(key)} "
                                 f"({_short(obj)}) does not serialize with the store's msg "
                                 f"serde: {exc}") from exc
        try:
            partition = partition_of(key_bytes, partitions, partitioner)
        except ValueError as exc:
            raise BootstrapError(f"store {store!r}: key {_short(key)}: {exc}") from exc
        return partition, key_bytes, value_bytes

    return encode


def _short(obj: Any, limit: int = 80) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[:limit] + "..."


def make_writer(
    producer_conf: dict[str, Any], topic: str, timeout: float = 300.0,
) -> Callable[[Iterable[Any]], Iterator[tuple[int, int, int, int]]]:
    """A picklable function over one Spark partition of (partition, key, value) rows that
    produces them to ``topic`` and yields (partition, records, tombstones, last offset).

    Every record is acknowledged before it returns; a delivery error raises (so the Spark
    job fails) rather than being dropped.
    """

    def write(rows: Iterable[Any]) -> Iterator[tuple[int, int, int, int]]:
        from millpond.changelog.errors import ChangelogError
        from millpond.kafka.errors import KafkaClientError
        from millpond.kafka.producer import TrackedProducer

        producer = TrackedProducer(producer_conf)
        counts: dict[int, list[int]] = {}
        try:
            for partition, key, value in rows:
                producer.send(topic, partition, bytes(key),
                              bytes(value) if value is not None else None)
                seen = counts.setdefault(partition, [0, 0])
                seen[0] += 1
                seen[1] += value is None
                if producer.sent % 10_000 == 0:
                    producer.poll()
            producer.flush_and_check(timeout)
        except (ChangelogError, KafkaClientError) as exc:
            raise BootstrapError(f"writing changelog {topic}: {exc}") from exc
        finally:
            producer.discard()
        for partition, (records, tombstones) in sorted(counts.items()):
            last = producer.last_offset(topic, partition)
            if last is None:  # flush_and_check passed, so every record was acknowledged
                raise BootstrapError(f"changelog {topic}[{partition}]: {records} records "
                                     "acknowledged without an offset")
            yield partition, records, tombstones, last

    return write

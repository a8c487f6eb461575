"""Recovery in steps against a real broker: a restore can be paused, and closed midway."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from millpond.changelog import local, restore
from millpond.changelog.checkpoint import StoreOffset, read_offset_file, write_offset_file
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.recovery import (
    RecoveryIO,
    StorePartition,
    local_start,
    recover_store,
    recover_store_steps,
)
from millpond.changelog.restore import RestoreStats
from millpond.kafka import reading
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import restore_consumer
from millpond.stores import RocksDbEngine
from tests.kafka_util import create_topic

pytestmark = pytest.mark.kafka

SMALL_BATCH = 100


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many restore steps out of a small changelog."""
    monkeypatch.setattr(reading, "BATCH", SMALL_BATCH)


@pytest.fixture
def consumer(kafka_bootstrap: str) -> Iterator[Consumer]:
    c = restore_consumer({"bootstrap.servers": kafka_bootstrap}, "read_uncommitted")
    try:
        yield c
    finally:
        c.close()


def _produce(bootstrap: str, topic: str, first: int, n: int, keys: int) -> dict[bytes, bytes]:
    """Write records ``first..first+n-1`` (key ``k<i % keys>``); the last value of each key."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    latest: dict[bytes, bytes] = {}
    for i in range(first, first + n):
        key, value = f"k{i % keys}".encode(), f"v{i}".encode()
        producer.produce(topic, key=key, value=value, partition=0)
        latest[key] = value
    assert producer.flush(30) == 0
    return latest


class Engines:
    """``open_engine`` for recovery that remembers every engine it opened."""

    def __init__(self, live: Path) -> None:
        self.live = live
        self.opened: list[RocksDbEngine] = []

    def __call__(self) -> RocksDbEngine:
        self.live.mkdir(parents=True, exist_ok=True)
        engine = RocksDbEngine(self.live)
        self.opened.append(engine)
        return engine


def _content(engine: Any) -> dict[bytes, bytes]:
    with engine.all() as entries:
        return dict(entries)


def _args(live: Path, topic: str, consumer: Consumer, guarantee: Guarantee,
          checkpointed: int | None, producer: TrackedProducer | None = None,
          ) -> tuple[StorePartition, Guarantee, int | None, RecoveryIO]:
    return (StorePartition("counts", topic, 0, live), guarantee, checkpointed,
            RecoveryIO(Engines(live), consumer, producer))


def test_closing_recovery_midway_closes_the_engine_and_unassigns_then_a_rerun_is_exact(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, consumer: Consumer,
) -> None:
    topic = topic_name("changelog")
    create_topic(kafka_bootstrap, topic, 1)
    latest = _produce(kafka_bootstrap, topic, 0, 1000, 97)
    live = local.store_dir(tmp_path, "job", "counts", 0)
    args = _args(live, topic, consumer, Guarantee.AT_LEAST_ONCE, None)
    steps = recover_store_steps(*args)
    seen = batches = 0
    while batches < 3:  # steps that wait for a fetch bring nothing
        stats = next(steps)
        assert isinstance(stats, RestoreStats)
        assert 0 <= stats.records - seen <= SMALL_BATCH, "one step is at most one batch"
        batches += stats.records > seen
        seen = stats.records
    assert consumer.assignment(), "mid-restore the restore consumer is assigned"
    steps.close()
    assert consumer.assignment() == []
    [engine] = args[3].open_engine.opened
    assert engine.closed, "the engine the caller never received is closed"
    assert read_offset_file(live) is None
    assert local_start(live, topic, 0) is None, "an interrupted restore is never clean"

    engine, result = recover_store(*_args(live, topic, consumer, Guarantee.AT_LEAST_ONCE, None))
    try:
        assert result.stats.full and result.stats.records == 1000 and result.offset == 999
        assert _content(engine) == latest
    finally:
        engine.close()
    assert read_offset_file(live) == StoreOffset("counts", topic, 0, 999)


def test_recovery_gives_control_back_before_the_store_opens_and_before_its_reads(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, consumer: Consumer,
) -> None:
    """The run loop steps an arriving task's recovery between polls: the observation and
    local copy, the store's open and the reads are separate steps (in one step they held
    the tasks that stay 30-36 ms). Closing it before the open leaves nothing open."""
    topic = topic_name("changelog")
    create_topic(kafka_bootstrap, topic, 1)
    latest = _produce(kafka_bootstrap, topic, 0, 50, 7)
    live = local.store_dir(tmp_path, "job", "counts", 0)
    args = _args(live, topic, consumer, Guarantee.AT_LEAST_ONCE, None)
    engines = args[3].open_engine
    steps = recover_store_steps(*args)
    first = next(steps)
    assert isinstance(first, RestoreStats) and (first.records, first.end_offset) == (0, 50)
    assert engines.opened == [] and consumer.assignment() == [], "planned, nothing opened"
    opened = next(steps)
    assert [e.closed for e in engines.opened] == [False] and opened.records == 0
    assert consumer.assignment() == [], "the store is open, not read yet"
    engine, result = restore.run_steps(steps)
    try:
        assert result.stats.records == 50 and _content(engine) == latest
    finally:
        engine.close()

    again = recover_store_steps(*_args(live, topic, consumer, Guarantee.AT_LEAST_ONCE, None))
    next(again)
    again.close()  # before the open: no engine to close, the store is not trusted as clean
    assert local_start(live, topic, 0) is None


def test_interrupted_restore_over_a_clean_store_is_not_trusted_later(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, consumer: Consumer,
) -> None:
    """A restore past the live OFFSET, closed midway, must not leave that OFFSET behind: a
    later recovery to the checkpoint would otherwise keep the half-replayed records."""
    topic = topic_name("changelog")
    create_topic(kafka_bootstrap, topic, 1)
    at_checkpoint = _produce(kafka_bootstrap, topic, 0, 500, 50)
    live = local.store_dir(tmp_path, "job", "counts", 0)
    engine, result = recover_store(*_args(live, topic, consumer, Guarantee.EFFECTIVELY_ONCE, 499))
    assert result.offset == 499 and _content(engine) == at_checkpoint
    # What a commit leaves: the store's RocksDB checkpoint beside it, with its OFFSET.
    tmp = live.with_name("tmp-ckpt")
    engine.checkpoint(tmp)
    write_offset_file(tmp, StoreOffset("counts", topic, 0, 499))
    local.install_checkpoint(tmp, live)
    engine.close()
    assert read_offset_file(live) == StoreOffset("counts", topic, 0, 499)

    _produce(kafka_bootstrap, topic, 500, 500, 50)  # every key gets a newer value
    steps = recover_store_steps(*_args(live, topic, consumer, Guarantee.AT_LEAST_ONCE, 499))
    first = next(steps)
    assert first.start_offset == 500 and not first.full, "starts from the clean live store"
    next(steps)
    steps.close()
    assert read_offset_file(live) is None
    assert local_start(live, topic, 0) == 499, "falls back to the last commit's checkpoint"

    producer = TrackedProducer({"bootstrap.servers": kafka_bootstrap})
    engine, result = recover_store(
        *_args(live, topic, consumer, Guarantee.EFFECTIVELY_ONCE, 499, producer))
    try:
        producer.flush_and_check()
        assert result.offset == 499 and result.trimmed == 50
        assert _content(engine) == at_checkpoint, "no record past the checkpoint survives"
    finally:
        engine.close()
        producer.close()


def test_restore_steps_yields_per_batch_and_restore_partition_drains(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, consumer: Consumer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []  # each restore gives what it freed back once, at its end
    monkeypatch.setattr(restore, "release_free_memory", lambda: trims.append(1) or True)
    topic = topic_name("changelog")
    create_topic(kafka_bootstrap, topic, 1)
    latest = _produce(kafka_bootstrap, topic, 0, 450, 1000)
    stepped, drained = RocksDbEngine(tmp_path / "a"), RocksDbEngine(tmp_path / "b")
    try:
        steps = restore.restore_steps(stepped, consumer, RestoreStats("s", topic, 0, 0, 450))
        counts = []
        while True:
            try:
                counts.append(next(steps).records)
            except StopIteration as stop:
                final = stop.value
                break
        assert len(set(counts) - {0}) >= 450 // SMALL_BATCH and counts[-1] == 450
        assert all(0 <= b - a <= SMALL_BATCH for a, b in zip([0, *counts], counts, strict=False))
        assert final.records == 450 and consumer.assignment() == []
        assert trims == [1]
        stats = restore.restore_partition(drained, consumer, RestoreStats("s", topic, 0, 0, 450))
        assert stats.records == 450 and trims == [1, 1]
        assert _content(stepped) == _content(drained) == latest
    finally:
        stepped.close()
        drained.close()


def test_a_restore_waiting_for_records_gives_the_caller_control_back(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, consumer: Consumer,
) -> None:
    """A task opens in the run loop a step at a time: a restore whose records have not come
    yet yields (no records) instead of waiting in the read, so the loop's other tasks go on;
    the record, once there, is restored."""
    topic = topic_name("changelog")
    create_topic(kafka_bootstrap, topic, 1)
    engine = RocksDbEngine(tmp_path / "s")
    try:
        steps = restore.restore_steps(engine, consumer, RestoreStats("s", topic, 0, 0, 1))
        waited = [next(steps).records for _ in range(3)]  # the record does not exist yet
        assert waited == [0, 0, 0]
        latest = _produce(kafka_bootstrap, topic, 0, 1, 1)
        final = None
        for _ in range(3000):  # ~READ_WAIT_S each: bounded
            try:
                next(steps)
            except StopIteration as stop:
                final = stop.value
                break
        assert final is not None and final.records == 1
        assert _content(engine) == latest and consumer.assignment() == []
    finally:
        engine.close()


def test_read_range_with_idle_yields_an_empty_batch_while_nothing_came(
    kafka_bootstrap: str, topic_name: Callable[[str], str], consumer: Consumer,
) -> None:
    topic = topic_name("range")
    create_topic(kafka_bootstrap, topic, 1)
    batches = reading.read_range(consumer, topic, 0, 0, 2, wait_s=0.01, idle=True)
    assert next(batches) == []
    _produce(kafka_bootstrap, topic, 0, 2, 2)
    got = []
    for batch in batches:  # ends at offset 2 (each read is bounded by wait_s, the whole by
        got.extend(m.offset() for m in batch)  # read_range's own 60 s stall timeout)
    assert got == [0, 1] and consumer.assignment() == []


def test_the_trim_holds_a_batch_of_keys_at_a_time_and_the_changelog_agrees(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, consumer: Consumer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Effectively-once recovery re-writes every key written after the checkpoint. It
    gathered them all first (a tail of 3M keys: 488 MiB in a 128 MiB job); now a restore
    batch's bytes of keys at a time, each re-written with the restored value (or a
    tombstone), so a key in several sets is re-written again with the same value."""
    monkeypatch.setattr(reading, "_batch_bytes", 1024)  # ~10 keys a set
    topic = topic_name("changelog")
    create_topic(kafka_bootstrap, topic, 1)
    at_checkpoint = _produce(kafka_bootstrap, topic, 0, 500, 50)  # k0..k49
    _produce(kafka_bootstrap, topic, 500, 500, 100)  # k0..k99, five times each
    live = local.store_dir(tmp_path, "job", "counts", 0)
    producer = TrackedProducer({"bootstrap.servers": kafka_bootstrap})
    engine, result = recover_store(
        *_args(live, topic, consumer, Guarantee.EFFECTIVELY_ONCE, 499, producer))
    try:
        producer.flush_and_check()
        assert _content(engine) == at_checkpoint
        assert result.trimmed >= 100  # every key at least once ...
        assert result.trimmed > 100, "... and in more than one set (the bound held)"
    finally:
        engine.close()
        producer.close()
    last: dict[bytes, bytes | None] = {}
    for batch in reading.read_range(consumer, topic, 0, 0, reading.watermarks(
            consumer, topic, 0)[1]):
        last.update((m.key(), m.value()) for m in batch)  # type: ignore[misc]
    assert {k: v for k, v in last.items() if v is not None} == at_checkpoint
    assert len(last) == 100  # k50..k99 end in tombstones

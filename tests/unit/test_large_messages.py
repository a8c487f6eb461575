"""Large values (Samza's disallow.large.messages / drop.large.messages), layer by layer."""

from __future__ import annotations

import logging

import pytest

from millpond.changelog.logged import LoggedStore
from millpond.config import SerdeSpec
from millpond.serdes import build_serde
from millpond.stores import (
    CachedStore,
    InMemoryEngine,
    LargeMessageError,
    LargeMessageSafeStore,
    NullSafeStore,
    SerializedStore,
    build_stack,
)
from tests.unit.test_stores_layers import RecordingProducer, layers

LIMIT = 100
BIG = "x" * 200  # 200 bytes as a string serde value
SMALL = "ok"


def serdes() -> tuple[object, object]:
    return (build_serde(SerdeSpec("k", "string", {}, "x")),
            build_serde(SerdeSpec("v", "string", {}, "x")))


# --- the layer alone --------------------------------------------------------------------------


def test_small_values_and_deletes_pass_through() -> None:
    engine = InMemoryEngine()
    layer = LargeMessageSafeStore(engine, "s", "disallow", LIMIT)
    layer.write_batch([(b"a", b"1" * LIMIT), (b"b", b"2")])  # exactly the limit is allowed
    layer.write_batch([(b"b", None)])
    assert engine.get(b"a") == b"1" * LIMIT and engine.get(b"b") is None


def test_disallow_refuses_the_whole_batch_naming_store_key_and_size() -> None:
    engine = InMemoryEngine()
    layer = LargeMessageSafeStore(engine, "profiles", "disallow", LIMIT)
    with pytest.raises(LargeMessageError) as info:
        layer.write_batch([(b"fine", b"1"), (b"user-7", b"x" * (LIMIT + 1))])
    message = str(info.value)
    assert "store 'profiles'" in message and "'user-7'" in message
    assert f"{LIMIT + 1} bytes" in message and f"={LIMIT}" in message
    assert engine.get(b"fine") is None  # nothing of the batch went down


def test_drop_skips_counts_and_logs_only_the_large_entries(
    caplog: pytest.LogCaptureFixture
) -> None:
    engine = InMemoryEngine()
    dropped_at: list[int] = []
    layer = LargeMessageSafeStore(engine, "s", "drop", LIMIT, on_drop=dropped_at.append)
    engine.put(b"big", b"old")
    with caplog.at_level(logging.WARNING):
        layer.write_batch([(b"a", b"1"), (b"big", b"y" * 500), (b"c", b"3")])
    assert (engine.get(b"a"), engine.get(b"big"), engine.get(b"c")) == (b"1", b"old", b"3")
    assert layer.dropped == 1 and dropped_at == [1]
    assert "dropped the write of key 'big'" in caplog.text and "500 bytes" in caplog.text


def test_drop_sends_nothing_to_the_changelog() -> None:
    producer = RecordingProducer()
    logged = LoggedStore(InMemoryEngine(), producer, "cl", 0)  # type: ignore[arg-type]
    layer = LargeMessageSafeStore(logged, "s", "drop", LIMIT)
    layer.write_batch([(b"a", b"1"), (b"big", b"y" * 500)])
    assert producer.sent == [("cl", 0, b"a", b"1")]


# --- in the stack -----------------------------------------------------------------------------


def stack(policy: str, **cache: int) -> tuple[object, InMemoryEngine, RecordingProducer]:
    key, msg = serdes()
    engine = InMemoryEngine()
    producer = RecordingProducer()
    built = build_stack(
        "s", engine, key, msg, large_messages=policy, max_message_size=LIMIT,  # type: ignore[arg-type]
        logged=lambda e: LoggedStore(e, producer, "cl", 0), **cache,  # type: ignore[arg-type]
    )
    return built.store, engine, producer


def test_the_layer_sits_between_serialized_and_logged() -> None:
    store, _, _ = stack("drop")
    assert layers(store) == [NullSafeStore, CachedStore, SerializedStore,
                             LargeMessageSafeStore, LoggedStore, InMemoryEngine]
    key, msg = serdes()
    plain = build_stack("p", InMemoryEngine(), key, msg)  # type: ignore[arg-type]
    assert LargeMessageSafeStore not in layers(plain.store)


@pytest.mark.parametrize("cache", [{}, {"write_batch_size": 0}, {"object_cache_size": 0}])
def test_a_dropped_write_is_not_visible_after_the_write_down(cache: dict[str, int]) -> None:
    store, engine, producer = stack("drop", **cache)
    store.put("k", "old")  # type: ignore[attr-defined]
    store.flush()  # type: ignore[attr-defined]
    store.put("k", BIG)  # type: ignore[attr-defined]
    store.put("other", SMALL)  # type: ignore[attr-defined]
    store.flush()  # type: ignore[attr-defined]
    assert store.get("k") == "old"  # type: ignore[attr-defined]
    assert store.get("other") == SMALL  # type: ignore[attr-defined]
    assert engine.get(b"k") == b"old"
    assert all(value != BIG.encode() for _, _, _, value in producer.sent)
    store.put("new", BIG)  # type: ignore[attr-defined]  # never stored before: absent after
    store.flush()  # type: ignore[attr-defined]
    assert store.get("new") is None  # type: ignore[attr-defined]
    assert engine.get(b"new") is None


def test_dropped_write_forgotten_across_chunked_write_downs_and_evictions() -> None:
    store, engine, _ = stack("drop", object_cache_size=3, write_batch_size=2)
    for i in range(6):  # evictions and write-batch write-downs interleave
        store.put(f"k{i}", BIG if i % 2 else SMALL)  # type: ignore[attr-defined]
    store.flush()  # type: ignore[attr-defined]
    for i in range(6):
        expected = None if i % 2 else SMALL
        assert store.get(f"k{i}") == expected  # type: ignore[attr-defined]
        assert engine.get(f"k{i}".encode()) == (None if i % 2 else SMALL.encode())


def test_disallow_fails_the_write_down_and_keeps_the_store_unchanged() -> None:
    store, engine, producer = stack("disallow")
    store.put("k", "old")  # type: ignore[attr-defined]
    store.flush()  # type: ignore[attr-defined]
    sent = list(producer.sent)
    store.put("k", BIG)  # type: ignore[attr-defined]
    with pytest.raises(LargeMessageError, match="store 's': key 'k': value of 200 bytes"):
        store.flush()  # type: ignore[attr-defined]
    assert engine.get(b"k") == b"old" and producer.sent == sent


def test_store_config_reaches_the_stack(tmp_path: object) -> None:
    from millpond.config import Config, parse_properties
    from millpond.tasks.storage import TaskStorage

    props = parse_properties(
        "job.name=j\nstores.s.factory=inmemory\nstores.s.key.serde=string\n"
        "stores.s.msg.serde=string\nstores.s.drop.large.messages=true\n"
        "stores.s.changelog.max.message.size.bytes=100\n", "job.properties")
    config = Config.from_properties(props)
    storage = TaskStorage.open(config, 0, None, None, None, None)  # type: ignore[arg-type]
    try:
        store = storage.stores["s"].store
        store.put("k", BIG)
        store.flush()
        assert store.get("k") is None
    finally:
        storage.close()

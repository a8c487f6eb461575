"""Undoing a skipped record's store writes (millpond.stores.undo) over real engines, with
and without the object cache, including write-downs in the middle of the record."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from millpond.serdes import JsonSerde, StringSerde
from millpond.stores import InMemoryEngine, RocksDbEngine, RocksDbOptions, build_stack
from millpond.stores.api import StorageEngine
from millpond.stores.cached import CachedStore
from millpond.stores.undo import RecordJournal, UndoLogStore

MiB = 1024 * 1024

# (engine, object.cache.size, write.batch.size): no cache, a tiny cache that evicts (and so
# writes down) inside records, a big one, write-through (every put is a write-down)
LAYOUTS = [(e, c, b) for e in ("rocksdb", "memory")
           for c, b in ((0, 50), (3, 2), (1000, 500), (1000, 0))]


def _engine(kind: str, tmp_path: Path) -> StorageEngine:
    if kind == "rocksdb":
        return RocksDbEngine(tmp_path / "db", RocksDbOptions(block_cache_size_bytes=8 * MiB,
                                                             write_buffer_size_bytes=4 * MiB))
    return InMemoryEngine()


def _below(engine: StorageEngine) -> dict[str, Any]:
    """What the engine holds, decoded."""
    import json
    with engine.all() as it:
        return {k.decode(): json.loads(v) for k, v in it}


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda p: f"{p[0]}-cache{p[1]}-batch{p[2]}")
def test_undo_restores_the_state_before_the_record(
    layout: tuple[str, int, int], tmp_path: Path
) -> None:
    kind, cache, batch = layout
    engine = _engine(kind, tmp_path)
    journal = RecordJournal()
    stack = build_stack("s", engine, StringSerde(), JsonSerde(), cache, batch, journal=journal)
    store = stack.store
    rng = random.Random(7)
    model: dict[str, Any] = {}
    keys = [f"k{i}" for i in range(12)]
    for rnd in range(300):
        entries = journal.start()
        before = dict(model)
        writes = 0
        for _ in range(rng.randint(1, 6)):
            key, op = rng.choice(keys), rng.random()
            if op < 0.55:
                value = {"n": rng.randint(0, 99), "r": rnd}
                store.put(key, value)
                model[key] = value
                writes += 1
            elif op < 0.75:
                store.delete(key)
                model.pop(key, None)
                writes += 1
            elif op < 0.9:
                assert store.get(key) == model.get(key)
            else:  # a scan writes the cache down in the middle of the record
                assert dict(store.all()) == model
        if rng.random() < 0.4:  # the record fails and is skipped
            assert journal.undo() == writes
            model = before
        else:
            entries.clear()
        journal.stop()
        if rnd % 25 == 0:
            store.flush()  # a commit between records
            assert _below(engine) == model
        assert {k: store.get(k) for k in keys} == {k: model.get(k) for k in keys}
    store.flush()
    assert _below(engine) == model
    store.close()


def test_journal_is_off_outside_records(tmp_path: Path) -> None:
    journal = RecordJournal()
    stack = build_stack("s", InMemoryEngine(), StringSerde(), JsonSerde(), journal=journal)
    stack.store.put("a", 1)  # e.g. in init() or window(): never undone
    assert journal.undo() == 0
    journal.start()
    stack.store.put("a", 2)
    journal.stop()
    assert stack.store.get("a") == 2


def test_layers_that_journal(tmp_path: Path) -> None:
    journal = RecordJournal()
    cached = build_stack("c", InMemoryEngine(), StringSerde(), JsonSerde(), journal=journal)
    plain = build_stack("p", InMemoryEngine(), StringSerde(), JsonSerde(), 0, journal=journal)
    assert isinstance(cached.cache, CachedStore)
    assert isinstance(plain.store.inner, UndoLogStore)  # type: ignore[attr-defined]
    journal.start()
    cached.store.put("a", 1)
    plain.store.put("a", 1)
    plain.store.delete("b")
    assert journal.undo() == 3
    journal.stop()
    assert cached.store.get("a") is None and plain.store.get("a") is None


def test_only_a_policy_that_skips_failed_records_turns_journaling_on(tmp_path: Path) -> None:
    """Without task.dlq.stream a failed process() stops the job: nothing is journaled (no
    cost per write); with it, every record's writes are (the undo of a skipped record)."""
    from millpond.config import Config
    from millpond.tasks.deadletter import DeadLetterPolicy

    base = "job.name=j\ntask.inputs=kafka.in\n"
    path = tmp_path / "job.properties"
    path.write_text(base)
    assert not DeadLetterPolicy(Config.load(path, env={}), lambda p: None).skips_process  # type: ignore[arg-type,return-value]
    path.write_text(base + "task.dlq.stream=kafka.dead\n")
    assert DeadLetterPolicy(Config.load(path, env={}), lambda p: None).skips_process  # type: ignore[arg-type,return-value]

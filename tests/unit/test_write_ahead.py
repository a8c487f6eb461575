"""Writing ahead: an idle run loop writes the oldest dirty cache entries down before a commit
is due, a chunk at a time, each entry dirty when the pass began at most once, so the commit
(which stops processing) has only what was dirtied since. Real RocksDB and store layers;
the changelog producer records what it is sent."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from millpond.changelog.checkpoint import StoreOffset, clear_offset_file, write_offset_file
from millpond.changelog.logged import LoggedStore
from millpond.config import StoreConfig
from millpond.serdes import JsonSerde, StringSerde
from millpond.stores import RocksDbEngine, RocksDbOptions, build_stack
from millpond.stores.cached import WRITE_CHUNK_BYTES
from millpond.stores.undo import RecordJournal
from millpond.tasks.runloop import POLL_BATCH, POLL_TIMEOUT_S, RunLoop
from millpond.tasks.storage import OpenStore, TaskStorage
from millpond.tasks.turns import CommitTurns
from millpond.tasks.writeahead import WriteAhead

SMALL = RocksDbOptions(block_cache_size_bytes=8 << 20, write_buffer_size_bytes=4 << 20)


class RecordingProducer:
    def __init__(self) -> None:
        self.keys: list[bytes] = []

    def send(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.keys.append(key)


def open_storage(live: Path) -> tuple[TaskStorage, Any, RecordingProducer]:
    live.mkdir(parents=True)
    engine = RocksDbEngine(live, SMALL)
    write_offset_file(live, StoreOffset("counts", "cl", 0, -1))
    producer = RecordingProducer()
    stack = build_stack(
        "counts", engine, StringSerde(), JsonSerde(),
        logged=lambda e: LoggedStore(e, producer, "cl", 0, lambda: clear_offset_file(live)),  # type: ignore[arg-type]
    )
    assert stack.cache is not None
    cfg = StoreConfig(name="counts", factory="rocksdb", key_serde="string", msg_serde="json")
    open_store = OpenStore(cfg, "cl", live, engine, stack.logged, stack.store, None, -1,
                           cache=stack.cache)
    return TaskStorage(0, {"counts": open_store}), stack.store, producer


def test_a_pass_writes_the_entries_dirty_when_it_began_oldest_first(tmp_path: Path) -> None:
    storage, store, producer = open_storage(tmp_path / "counts" / "partition-0")
    for i in range(5):
        store.put(f"k{i}", i)
    storage.plan_write_ahead()
    assert storage.write_ahead(2) == 2
    assert producer.keys == [b"k0", b"k1"]  # the oldest dirty first
    store.put("k0", 10)  # dirtied again, and a new key: both wait for the commit
    store.put("new", 1)
    assert storage.write_ahead(10) == 3
    assert producer.keys == [b"k0", b"k1", b"k2", b"k3", b"k4"]
    assert storage.write_ahead(10) == 0  # the pass is over: k0 and new are not written twice
    assert storage.stores["counts"].engine.get(b"k4") == b"4"  # in RocksDB, before any commit
    storage.flush()  # the commit writes what was dirtied since
    assert sorted(producer.keys[5:]) == [b"k0", b"new"]
    assert storage.write_ahead(10) == 0  # a commit ends the pass
    storage.close()


def test_nothing_is_written_ahead_inside_a_record(tmp_path: Path) -> None:
    """A record's writes may still be undone (a skipped record): never written mid-record."""
    storage, store, producer = open_storage(tmp_path / "counts" / "partition-0")
    store.put("a", 1)
    cache = storage.stores["counts"].cache
    assert cache is not None
    journal = RecordJournal()
    journal.attach(cache)
    entries = journal.start()
    store.put("b", 2)  # a record's write, not done yet
    assert cache.write_ahead(10) == 0 and producer.keys == []
    entries.clear()  # the record succeeded
    assert cache.write_ahead(10) == 2 and producer.keys == [b"a", b"b"]
    journal.stop()
    storage.close()


def test_only_an_idle_loop_near_a_commit_writes_ahead(tmp_path: Path) -> None:
    storage, store, producer = open_storage(tmp_path / "counts" / "partition-0")
    for i in range(500):
        store.put(f"k{i}", i)
    task: Any = SimpleNamespace(storage=storage, partition=0)
    moved: list[Any] = []
    ahead = WriteAhead(commit_every_s=1.0, share=0.2, chunk=200)

    def step(since: float) -> bool:
        return ahead.step([(task, since)], lambda t, exc: moved.append((t, exc)))

    assert not step(0.5) and producer.keys == []  # early in the interval: nothing
    assert step(0.85) and len(producer.keys) == 200  # in its last fifth: a chunk a step
    assert step(0.9) and step(0.95) and len(producer.keys) == 500
    assert not step(0.97)  # all written
    ahead.committed([0])
    storage.flush()
    store.put("x", 1)
    assert step(0.9) and producer.keys[-1] == b"x"  # a new pass after the commit
    # the task closed (moved away, or failed) and reopened: its new storage plans a pass
    assert not ahead.step([], lambda t, exc: moved.append((t, exc)))
    storage.flush()
    store.put("y", 2)
    assert step(0.9) and producer.keys[-1] == b"y"
    assert not WriteAhead(commit_every_s=0).step([(task, 10.0)], lambda t, e: None)
    assert moved == []
    storage.close()


class Queue:
    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []

    def consume(self, num: int, timeout: float) -> list[Any]:
        self.calls.append((num, timeout))
        return []


def test_the_idle_poll_writes_a_chunk_then_looks_for_input_without_waiting(
        tmp_path: Path) -> None:
    storage, store, producer = open_storage(tmp_path / "counts" / "partition-0")
    store.put("a", 1)
    queue = Queue()
    run = RunLoop.__new__(RunLoop)
    run._queries = None
    run.manager = SimpleNamespace(consumer=queue, committing=lambda p: False,
                                  all_committing=lambda: False)  # type: ignore[assignment]
    run.opener = SimpleNamespace(due=False)  # type: ignore[assignment]
    run.tasks = {0: SimpleNamespace(storage=storage, partition=0)}  # type: ignore[dict-item]
    run._ahead = WriteAhead(commit_every_s=1.0)
    run._turns = CommitTurns(1.0)
    run._turns.track([0], time.monotonic() - 5)  # long ago: a commit is due
    assert run._poll() == []
    assert producer.keys == [b"a"]
    assert queue.calls == [(POLL_BATCH, 0), (POLL_BATCH, 0)]  # no wait after writing
    assert run._poll() == []  # nothing left to write: the usual wait for input
    assert queue.calls[-1] == (1, POLL_TIMEOUT_S)
    storage.close()


def test_a_write_ahead_step_is_at_most_one_write_down_chunk(tmp_path: Path) -> None:
    """Large values: a step writes about WRITE_CHUNK_BYTES, as the commit's write-down does,
    not ``limit`` entries at once."""
    storage, store, producer = open_storage(tmp_path / "counts" / "partition-0")
    for i in range(20):
        store.put(f"k{i}", "x" * (WRITE_CHUNK_BYTES // 4))  # ~4 entries per chunk
    cache = storage.stores["counts"].cache
    assert cache is not None
    n = cache.write_ahead(20)
    assert 1 <= n <= 5 and producer.keys == [f"k{i}".encode() for i in range(n)]
    storage.close()

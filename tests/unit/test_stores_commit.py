"""Changelogged stores write RocksDB without its WAL; the commit makes those writes durable
before it writes OFFSET. Proven on a real RocksDB directory, copied while open as a crash
would leave it (no close, no flush)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from millpond.changelog.checkpoint import (
    StoreOffset,
    clear_offset_file,
    read_offset_file,
    write_offset_file,
)
from millpond.changelog.local import checkpoint_dir
from millpond.changelog.logged import LoggedStore
from millpond.config import StoreConfig
from millpond.serdes import JsonSerde, StringSerde
from millpond.stores import RocksDbEngine, RocksDbOptions, build_stack
from millpond.tasks.storage import (
    LOCAL_CHECKPOINT_RECORDS,
    CheckpointBudget,
    OpenStore,
    TaskStorage,
)

SMALL = RocksDbOptions(block_cache_size_bytes=8 << 20, write_buffer_size_bytes=4 << 20)


class RecordingProducer:
    """Stands in for TrackedProducer: the logged layer only calls send()."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes, bytes | None]] = []

    def send(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.sent.append((topic, partition, key, value))


def open_storage(live: Path) -> tuple[TaskStorage, Any, RecordingProducer]:
    live.mkdir(parents=True)
    engine = RocksDbEngine(live, SMALL)
    write_offset_file(live, StoreOffset("counts", "cl", 0, -1))  # clean, as after recovery
    producer = RecordingProducer()
    stack = build_stack(
        "counts", engine, StringSerde(), JsonSerde(),
        logged=lambda e: LoggedStore(e, producer, "cl", 0, lambda: clear_offset_file(live)),  # type: ignore[arg-type]
    )
    cfg = StoreConfig(name="counts", factory="rocksdb", key_serde="string", msg_serde="json")
    open_store = OpenStore(cfg, "cl", live, engine, stack.logged, stack.store, None, -1,
                           cache=stack.cache)
    return TaskStorage(0, {"counts": open_store}), stack.store, producer


def crash_copy(live: Path, dest: Path) -> dict[bytes, bytes]:
    """What a crash right now would leave: the directory's files, reopened elsewhere."""
    shutil.copytree(live, dest)
    engine = RocksDbEngine(dest, SMALL)
    try:
        with engine.all() as entries:
            return dict(entries)
    finally:
        engine.close()


def test_wal_less_writes_are_durable_once_after_commit_wrote_offset(tmp_path: Path) -> None:
    live = tmp_path / "counts" / "partition-0"
    storage, store, producer = open_storage(live)
    store.put("a", 1)
    store.put("b", 2)
    assert read_offset_file(live) is not None  # cached only: the directory is still clean
    with store.all() as it:  # a scan writes dirty entries down (WAL off, no memtable flush)
        assert dict(it) == {"a": 1, "b": 2}
    assert read_offset_file(live) is None  # the first write-down made the directory untrusted
    assert len(producer.sent) == 2
    # The WAL is off: a crash now would lose the writes, which is why OFFSET is gone.
    assert crash_copy(live, tmp_path / "crash-before-commit") == {}

    logged = storage.stores["counts"].logged
    assert logged is not None and logged.unflushed
    logged.sync()  # what after_commit does first (RocksDB's checkpoint would flush as well)
    assert not logged.unflushed
    assert crash_copy(live, tmp_path / "crash-after-sync") == {b"a": b"1", b"b": b"2"}

    storage.after_commit()  # the commit: memtables flushed, checkpoint taken, OFFSET written
    offset = read_offset_file(live)
    assert offset is not None and offset.offset == -1
    assert crash_copy(live, tmp_path / "crash-after-commit") == {b"a": b"1", b"b": b"2"}
    storage.close()


def test_commit_flush_writes_down_and_the_local_checkpoint_flushes_memtables(
        tmp_path: Path) -> None:
    """The commit's first phase writes the cache down (engine and changelog) but leaves the
    memtables alone; they are flushed where the store is checkpointed locally, before its
    OFFSET says the directory is clean."""
    live = tmp_path / "counts" / "partition-0"
    storage, store, producer = open_storage(live)
    for i in range(100):
        store.put("k", i)  # one key, many writes: one record at the commit
    storage.flush()
    assert producer.sent == [("cl", 0, b"k", b"99")]
    assert storage.stores["counts"].engine.get(b"k") == b"99"  # in the engine
    assert crash_copy(live, tmp_path / "after-flush") == {}  # (its memtable: no WAL)
    assert read_offset_file(live) is None  # so the directory is not trusted
    storage.after_commit()
    assert read_offset_file(live) is not None
    assert crash_copy(live, tmp_path / "after-commit") == {b"k": b"99"}
    storage.close()


def test_committed_reads_follow_each_commit_and_overflow_until_the_next(
        tmp_path: Path, monkeypatch: Any) -> None:
    from millpond.changelog import logged as logged_module
    from millpond.query import Open, Query
    from millpond.query.reads import StoreView, answer
    from millpond.tasks.queries import _committed

    live = tmp_path / "counts" / "partition-0"
    storage, store, _ = open_storage(live)
    storage.committed_reads = True
    opened = storage.stores["counts"]

    class Here:
        def locate(self, partition: int) -> Open:
            return Open({"counts": StoreView(StringSerde(), JsonSerde(), opened.engine, None,
                                             _committed(opened))})

    def committed(key: str) -> Any:
        """The committed value of ``key`` (None: none), or the status of a refusal."""
        got = answer(Query("counts", 0, "get", keys=(key.encode(),), committed=True), Here())
        if got.status != 200:
            return got.status
        return got.body["entries"][0]["value"] if got.body["entries"] else None

    storage.mark_committed()  # as a task opening does
    store.put("a", 1)
    store.flush()  # written down to RocksDB before any commit (as an eviction would be)
    assert (committed("a"), opened.logged and opened.logged.touched) == (None, {b"a"})
    storage.after_commit()
    assert committed("a") == 1
    monkeypatch.setattr(logged_module, "TOUCHED_MAX", 2)
    store.put_all([("a", 2), ("b", 1), ("c", 1)])
    store.flush()  # three keys written since the commit: more than it follows
    assert committed("a") == 503
    storage.after_commit()
    assert (committed("a"), committed("c")) == (2, 1)
    storage.close()  # releases the snapshot: the database closes and can open again
    RocksDbEngine(live, SMALL).close()


def test_a_commit_checkpoints_locally_once_the_changelog_moved_the_threshold(
        tmp_path: Path) -> None:
    """After the first commit, a commit leaves the store's live directory untrusted and its
    checkpoint as it was until the changelog is LOCAL_CHECKPOINT_RECORDS past that
    checkpoint (or the commit is final); the checkpoint always reflects its OFFSET."""
    live = tmp_path / "counts" / "partition-0"
    storage, store, _ = open_storage(live)
    s = storage.stores["counts"]
    ckpt = checkpoint_dir(live)

    def commit(offset: int, final: bool = False) -> None:
        storage.flush()
        s.offset = offset  # what record_delivered sets from the producer's acknowledgements
        storage.after_commit(final)

    store.put("a", 1)
    commit(0)  # the first commit after opening: always checkpointed
    assert read_offset_file(ckpt) == StoreOffset("counts", "cl", 0, 0)
    assert read_offset_file(live) == StoreOffset("counts", "cl", 0, 0)

    store.put("a", 2)
    commit(LOCAL_CHECKPOINT_RECORDS - 1)  # below the threshold: no local checkpoint
    assert read_offset_file(ckpt) == StoreOffset("counts", "cl", 0, 0)
    assert read_offset_file(live) is None  # its writes are not trusted after a crash
    assert crash_copy(ckpt, tmp_path / "old-ckpt") == {b"a": b"1"}  # what a crash restores

    store.put("a", 3)
    commit(LOCAL_CHECKPOINT_RECORDS)  # the threshold: checkpointed
    assert read_offset_file(ckpt) == StoreOffset("counts", "cl", 0, LOCAL_CHECKPOINT_RECORDS)
    assert read_offset_file(live) == StoreOffset("counts", "cl", 0, LOCAL_CHECKPOINT_RECORDS)
    assert crash_copy(ckpt, tmp_path / "new-ckpt") == {b"a": b"3"}

    store.put("a", 4)
    commit(LOCAL_CHECKPOINT_RECORDS + 1, final=True)  # the task stops: checkpointed anyway
    assert read_offset_file(live) == StoreOffset("counts", "cl", 0, LOCAL_CHECKPOINT_RECORDS + 1)
    assert crash_copy(ckpt, tmp_path / "final-ckpt") == {b"a": b"4"}

    commit(LOCAL_CHECKPOINT_RECORDS + 1)  # nothing written since: the live copy stays clean
    assert read_offset_file(live) == StoreOffset("counts", "cl", 0, LOCAL_CHECKPOINT_RECORDS + 1)

    # Stores due together take turns: one per commit, unless twice the threshold behind.
    budget = CheckpointBudget()
    at = LOCAL_CHECKPOINT_RECORDS + 1
    store.put("a", 5)
    storage.flush()
    s.offset = at + LOCAL_CHECKPOINT_RECORDS
    assert budget.take(overdue=False)  # another store took this commit's checkpoint
    storage.after_commit(budget=budget)
    assert read_offset_file(ckpt) == StoreOffset("counts", "cl", 0, at)  # its turn comes later
    s.offset = at + 2 * LOCAL_CHECKPOINT_RECORDS
    storage.after_commit(budget=budget)  # overdue: taken anyway
    assert read_offset_file(ckpt) == StoreOffset("counts", "cl", 0, s.offset)
    storage.close()

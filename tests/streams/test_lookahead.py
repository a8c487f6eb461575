"""Lookup joins read a batch's table values ahead (one get_all a table): what each record
joins equals what the test driver's record-at-a-time run joins, table writes in the same
batch included; a batch that cannot be read ahead is read per record.

The app's chains run over real store stacks (object cache, serialized layer, RocksDB) with
the batch hooks the run loop calls; an engine subclass counts the reads that reach RocksDB.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from millpond.serdes import JsonSerde, SerdeError, StringSerde
from millpond.stores import RocksDbEngine, build_stack
from millpond.streams import App, TestDriver
from millpond.streams.runtime import Clock, batch_reads, chains


class CountingEngine(RocksDbEngine):
    """RocksDB, counting the single gets and the multi-gets (and their keys) it serves."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gets = 0
        self.multi: list[int] = []

    def get(self, key: bytes) -> bytes | None:
        self.gets += 1
        return super().get(key)

    def get_all(self, keys: Any) -> dict[bytes, bytes]:
        keys = list(keys)
        self.multi.append(len(keys))
        return super().get_all(keys)


class Msg:
    """A consumed record as the run loop hands it on (confluent-kafka's Message methods)."""

    def __init__(self, topic: str, key: str | None, value: Any, ts: int) -> None:
        self._topic, self._ts = topic, ts
        self._key = None if key is None else key.encode()
        self._value = None if value is None else json.dumps(value).encode()

    def topic(self) -> str:
        return self._topic

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class Env:
    """The task's side for the operators: real store stacks, sends recorded."""

    def __init__(self, app: App, tmp: Path, cache: int = 0) -> None:
        self.engines = {name: CountingEngine(tmp / name) for name in app.stores}
        self.stores = {name: build_stack(name, engine, StringSerde(), JsonSerde(), cache).store
                       for name, engine in self.engines.items()}
        self.sent: list[tuple[str, Any, Any, int]] = []
        self.clock = Clock()

    def store(self, name: str) -> Any:
        return self.stores[name]

    def send(self, topic: str, key: Any, value: Any, timestamp: int) -> None:
        self.sent.append((topic, key, value, timestamp))

    def internal_topic(self, name: str) -> str:
        return f"{name}-repartition"

    def late(self, operator: str) -> None:
        raise AssertionError(operator)

    def run(self, app: App, batches: list[list[Msg]],
            key_serde: Any = None) -> list[tuple[str, Any, Any, int]]:
        """Each batch as the run loop runs it: read ahead, every record, then done."""
        memo: dict[Any, Any] = {}
        steps = chains(app, self, memo)
        reads = batch_reads(app, self, memo)
        serdes = (key_serde or StringSerde(), JsonSerde())
        for batch in batches:
            reads.before(batch, lambda topic: serdes)
            try:
                for msg in batch:
                    key = msg.key()
                    value = msg.value()
                    steps[msg.topic()](None if key is None else serdes[0].from_bytes(key),
                                       None if value is None else json.loads(value), msg._ts)
            finally:
                reads.after()
        return self.sent


def _enrich(view: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Any]:
    return {**view, "zip": profile and profile["zip"]}


def _app(how: str = "inner") -> App:
    app = App()
    zips = app.table("profiles", "user-zips")
    (app.source("views").filter(lambda v: v["page"] != "/skip").map(lambda v: {**v, "seen": 1})
     .join(zips, _enrich, how=how).to("out"))
    return app


def _driver_run(app: App, batches: list[list[Msg]]) -> list[tuple[str, Any, Any, int]]:
    driver = TestDriver(app)
    for batch in batches:
        for msg in batch:
            key, value = msg.key(), msg.value()
            driver.pipe(msg.topic(), None if key is None else key.decode(),
                        None if value is None else json.loads(value), msg._ts)
    return [("out", k, v, ts) for k, v, ts in driver.read("out", timestamps=True)]


def _views(users: list[str], page: str, ts: int) -> list[Msg]:
    return [Msg("views", user, {"page": page}, ts + i) for i, user in enumerate(users)]


@pytest.mark.parametrize("how", ["inner", "left"])
def test_a_batch_reads_its_keys_once_and_sees_table_writes_made_in_it(
        tmp_path: Path, how: str) -> None:
    users = [f"user-{i}" for i in range(40)]
    table = [Msg("profiles", u, {"zip": f"z{i}"}, 0) for i, u in enumerate(users[:30])]
    batch = (_views(users, "/a", 100)
             + [Msg("profiles", "user-1", {"zip": "moved"}, 200),
                Msg("profiles", "user-2", None, 201),  # deleted
                Msg("profiles", "user-35", {"zip": "new"}, 202)]  # a key the table lacked
             + _views(["user-1", "user-2", "user-35", "user-3"], "/b", 300)
             + _views(["user-4"], "/skip", 400))
    batches = [table, batch]
    env = Env(_app(how), tmp_path)
    got = env.run(_app(how), batches)
    assert got == _driver_run(_app(how), batches)
    assert ("out", "user-1", {"page": "/b", "seen": 1, "zip": "moved"}, 300) in got
    assert ("out", "user-35", {"page": "/b", "seen": 1, "zip": "new"}, 302) in got
    engine = env.engines["user-zips"]
    # the second batch's 45 views (40 users, the one the filter drops included) in one
    # multi-get; the 3 keys written in the batch were read again after their writes
    assert engine.multi == [40] and engine.gets == 3


def test_an_object_cache_serves_what_it_holds_and_the_rest_is_one_multi_get(
        tmp_path: Path) -> None:
    users = [f"user-{i}" for i in range(40)]
    batches = [[Msg("profiles", u, {"zip": f"z{i}"}, 0) for i, u in enumerate(users[:30])],
               _views(users, "/a", 100)
               + [Msg("profiles", "user-1", {"zip": "moved"}, 200)]
               + _views(["user-1"], "/b", 300)]
    env = Env(_app("left"), tmp_path, cache=1000)
    assert env.run(_app("left"), batches) == _driver_run(_app("left"), batches)
    # the 30 profiles written are cached; the 10 users without one: one multi-get
    assert env.engines["user-zips"].multi == [10] and env.engines["user-zips"].gets == 0


def test_a_join_below_a_re_key_reads_ahead_on_the_internal_topic(tmp_path: Path) -> None:
    app = App()
    zips = app.table("profiles", "user-zips")
    (app.source("clicks").key_by("by-user", lambda v: v["user"])
     .join(zips, _enrich).to("out"))
    env = Env(app, tmp_path)
    memo: dict[Any, Any] = {}
    chains(app, env, memo)
    reads = batch_reads(app, env, memo)
    assert list(reads.by_topic) == ["by-user-repartition"]
    assert [t.name for t in reads.by_topic["by-user-repartition"]] == ["user-zips"]


def test_a_join_after_an_aggregation_is_read_per_record(tmp_path: Path) -> None:
    app = App()
    zips = app.table("profiles", "user-zips")
    (app.source("views").count("counts").join(zips, lambda n, p: {"n": n, **p}).to("out"))
    env = Env(app, tmp_path)
    batches = [[Msg("profiles", "ann", {"zip": "1"}, 0)],
               [Msg("views", "ann", {"page": "/a"}, 1), Msg("views", "ann", {"page": "/b"}, 2)]]
    assert env.run(app, batches) == _driver_run(app, batches)
    assert env.engines["user-zips"].multi == []  # nothing read ahead: the key is the count's


def test_keys_that_do_not_decode_are_not_read_ahead(tmp_path: Path) -> None:
    class Strict(StringSerde):
        def from_bytes(self, data: bytes) -> str:
            if data == b"bad":
                raise ValueError("not a key")
            return super().from_bytes(data)

    app = _app()
    env = Env(app, tmp_path)
    batches = [[Msg("profiles", "ann", {"zip": "1"}, 0)],
               [Msg("views", "ann", {"page": "/a"}, 1), Msg("views", "bad", {"page": "/b"}, 2)]]
    with pytest.raises(ValueError, match="not a key"):  # the record's own decode says so
        env.run(app, batches, key_serde=Strict())
    assert env.engines["user-zips"].multi == []
    assert env.sent == [("out", "ann", {"page": "/a", "seen": 1, "zip": "1"}, 1)]


def test_a_value_that_does_not_decode_fails_its_own_record(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = _app()
    env = Env(app, tmp_path)
    env.run(app, [[Msg("profiles", u, {"zip": u}, 0) for u in ("ann", "bob")]])
    env.engines["user-zips"].put(b"bob", b"{not json")  # a stored value no serde reads
    caplog.set_level(logging.WARNING, "millpond.streams")
    with pytest.raises(SerdeError, match="key 'bob'"):  # the failing record's own get
        env.run(app, [[Msg("views", "ann", {"page": "/a"}, 1),
                       Msg("views", "bob", {"page": "/b"}, 2)]])
    assert env.sent == [("out", "ann", {"page": "/a", "seen": 1, "zip": "ann"}, 1)]
    assert "reading a batch's keys together failed" in caplog.text

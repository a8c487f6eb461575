"""Live queries without Kafka: cache-over-engine reads, pages, tokens, request parsing."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from millpond.query import Answer, Mailbox, Open, Query, StoreView, Unavailable
from millpond.query.reads import Committed, answer, untoken
from millpond.query.server import parse_request, single
from millpond.serdes.builtins import BytesSerde, JsonSerde, LongSerde, StringSerde
from millpond.stores import InMemoryEngine
from millpond.stores.cached import CachedStore
from millpond.stores.serialized import SerializedStore


class Tasks:
    def __init__(self, stores: dict[int, dict[str, StoreView]]) -> None:
        self.stores = stores

    def locate(self, partition: int) -> Open | Unavailable:
        if partition in self.stores:
            return Open(self.stores[partition])
        return Unavailable("not here", {"counts": {"records": 5, "remaining": 7}})


def cached_store(key_serde: Any = None) -> tuple[CachedStore[Any, Any], StoreView]:
    key_serde = key_serde or StringSerde()
    engine = InMemoryEngine()
    cache = CachedStore(SerializedStore(engine, key_serde, JsonSerde(), "counts"), "counts")
    return cache, StoreView(key_serde, JsonSerde(), engine, cache)


SERDES = {"counts": (StringSerde(), JsonSerde()), "n": (LongSerde(), JsonSerde()),
          "raw": (BytesSerde(), BytesSerde())}


def ask(path: str, tasks: Tasks) -> Answer:
    parsed = parse_request(path, SERDES)
    if isinstance(parsed, Answer):
        return parsed
    got = answer(parsed, tasks)
    return single(got) if "/get?" in path else got


def test_gets_see_the_cache_over_the_engine_without_touching_it() -> None:
    cache, view = cached_store()
    cache.put_all([("a", 1), ("b", 2)])
    cache.flush()  # written down: clean in the cache and in the engine
    cache.put("a", 10)  # dirty
    cache.delete("b")  # a dirty delete hides the engine's value
    view.engine.put(b"c", b"3")  # only in the engine
    hits, misses = cache.hits, cache.misses
    tasks = Tasks({0: {"counts": view}})
    assert ask("/stores/counts/0/get?key=a", tasks).body["value"] == 10
    assert ask("/stores/counts/0/get?key=b", tasks).body["found"] is False
    got = ask("/stores/counts/0/get-many?key=a&key=b&key=c&key=zz", tasks).body
    assert got["entries"] == [{"key": "a", "value": 10}, {"key": "c", "value": 3}]
    assert got["missing"] == ["b", "zz"]
    assert (cache.hits, cache.misses, cache.dirty_count) == (hits, misses, 2)
    assert cache.peek("c") is not None  # never cached by the query: NOT_CACHED
    assert "c" not in dict(cache.dirty_items())


def test_pages_cover_a_range_exactly_once_with_dirty_entries_laid_over() -> None:
    cache, view = cached_store()
    cache.put_all([(f"k{i:03}", i) for i in range(0, 100)])
    cache.flush()
    for i in range(0, 100, 3):
        cache.put(f"k{i:03}", -i)  # dirty updates
    for i in range(1, 100, 7):
        cache.delete(f"k{i:03}")  # dirty deletes
    cache.put("k050x", 5050)  # dirty insert between engine keys
    expected = {k: v for k, v in
                [(f"k{i:03}", -i if i % 3 == 0 else i) for i in range(100) if (i - 1) % 7]}
    expected["k050x"] = 5050
    wanted = {k: v for k, v in expected.items() if "k010" <= k < "k090"}
    tasks = Tasks({3: {"counts": view}})
    seen: list[tuple[str, int]] = []
    path = "/stores/counts/3/range?from=k010&to=k090&limit=7"
    pages = 0
    while True:
        body = ask(path, tasks).body
        pages += 1
        assert len(body["entries"]) <= 7
        seen += [(e["key"], e["value"]) for e in body["entries"]]
        if body["next"] is None:
            break
        path = f"/stores/counts/3/range?from=k010&to=k090&limit=7&next={body['next']}"
    assert seen == sorted(wanted.items())
    assert pages == -(-len(wanted) // 7)


def test_prefix_and_open_ended_ranges() -> None:
    cache, view = cached_store()
    cache.put_all([("user-1", 1), ("user-10", 10), ("user-2", 2), ("other", 0)])
    tasks = Tasks({0: {"counts": view}})
    got = ask("/stores/counts/0/prefix?prefix=user-1&limit=1", tasks).body
    assert [e["key"] for e in got["entries"]] == ["user-1"]
    more = ask(f"/stores/counts/0/prefix?prefix=user-1&next={got['next']}", tasks).body
    assert [e["key"] for e in more["entries"]] == ["user-10"] and more["next"] is None
    assert [e["key"] for e in ask("/stores/counts/0/range?from=user-10",
                                  tasks).body["entries"]] == ["user-10", "user-2"]
    assert [e["key"] for e in ask("/stores/counts/0/range?to=user-1",
                                  tasks).body["entries"]] == ["other"]


def test_numeric_keys_range_in_numeric_order() -> None:
    engine = InMemoryEngine()
    store = SerializedStore(engine, LongSerde(), JsonSerde(), "n")
    for k in (-5, -1, 0, 3, 1000):
        store.put(k, {"k": k})
    tasks = Tasks({0: {"n": StoreView(LongSerde(), JsonSerde(), engine)}})
    got = ask("/stores/n/0/range?from=-2&to=1000", tasks).body
    assert [e["key"] for e in got["entries"]] == [-1, 0, 3]


def test_bytes_render_as_base64() -> None:
    engine = InMemoryEngine()
    engine.put(b"\x00\xff", b"\x01\x02")
    tasks = Tasks({0: {"raw": StoreView(BytesSerde(), BytesSerde(), engine)}})
    got = ask("/stores/raw/0/get?key=AP8=", tasks).body
    assert got == {"store": "raw", "partition": 0, "key": "AP8=", "value": "AQI=",
                   "found": True}


@pytest.mark.parametrize(("path", "status", "needle"), [
    ("/stores/nope/0/get?key=a", 404, "unknown store 'nope'"),
    ("/stores/counts/x/get?key=a", 400, "not a number"),
    ("/stores/counts/0/get", 400, "one key"),
    ("/stores/counts/0/get?key=a&key=b", 400, "one key"),
    ("/stores/n/0/get?key=abc", 400, "not a key of serde"),
    ("/stores/counts/0/range?limit=0", 400, "limit"),
    ("/stores/counts/0/range?from=b&next=k1.YQ==", 400, "not from this range"),
    ("/stores/counts/0/prefix?prefix=u&next=k1.YQ==", 400, "not from this prefix"),
    ("/stores/counts/0/range?next=garbage", 400, "not a continuation token"),
    ("/stores/counts/0/scan", 404, "no such query"),
    ("/elsewhere", 404, "no such endpoint"),
])
def test_bad_requests(path: str, status: int, needle: str) -> None:
    got = ask(path, Tasks({}))
    assert got.status == status and needle in got.body["error"], got
    if status == 404 and "store" in needle:
        assert got.body["stores"] == ["counts", "n", "raw"]


def test_a_partition_not_open_here_is_503_with_the_reason_and_progress() -> None:
    got = ask("/stores/counts/5/get?key=a", Tasks({}))
    assert got.status == 503
    assert got.body["error"] == "not here" and got.body["restore"]["counts"]["remaining"] == 7


def test_tokens_round_trip() -> None:
    from millpond.query.reads import token

    for key in (b"", b"\x00", b"\xff\xfe", "é".encode()):
        assert untoken(token(key)) == key


def test_mailbox_answers_on_the_serving_thread_and_refuses_when_closed() -> None:
    mailbox = Mailbox(timeout_s=5)
    query = Query("counts", 0, "get", keys=(b"a",))
    assert mailbox.ask(query).status == 503  # not serving yet: starting
    mailbox.open()
    cache, view = cached_store()
    cache.put("a", 1)
    tasks = Tasks({0: {"counts": view}})
    got: list[Answer] = []
    asker = threading.Thread(target=lambda: got.append(mailbox.ask(query)))
    asker.start()
    while not mailbox.serve(tasks):
        asker.join(0.01)
    asker.join(5)
    assert got[0].body["entries"] == [{"key": "a", "value": 1}]
    mailbox.close("stopping")
    assert mailbox.ask(query).body == {"error": "stopping"}


def test_a_query_the_loop_does_not_reach_in_time_is_503() -> None:
    mailbox = Mailbox(timeout_s=0.05)
    mailbox.open()
    got = mailbox.ask(Query("counts", 0, "get", keys=(b"a",)))
    assert got.status == 503 and "did not come to the query" in got.body["error"]
    assert mailbox.serve(Tasks({})) == 0  # abandoned: not answered later


def test_the_address_key(tmp_path: Any) -> None:
    from millpond.config import ConfigError, load_properties
    from millpond.config.job import parse_job

    def address(text: str) -> Any:
        path = tmp_path / "job.properties"
        path.write_text(f"job.name=j\njob.query.address={text}\n")
        return parse_job(load_properties(path)).query_address

    assert address("") is None
    assert address("127.0.0.1:9405") == ("127.0.0.1", 9405)
    assert address("[::1]:0") == ("::1", 0)
    for bad in ("9405", "host:", ":80", "h:99999", "h:x"):
        with pytest.raises(ConfigError, match="job.properties:2.*not host:port"):
            address(bad)


def test_the_task_directory_says_open_opening_restoring_or_not_here() -> None:
    from types import SimpleNamespace

    from millpond.tasks.queries import TaskDirectory

    cache, view = cached_store()
    stores = {"counts": SimpleNamespace(engine=view.engine, cache=cache, snapshot=None,
                                        logged=None)}
    progress = SimpleNamespace(store="counts", records=300, remaining=700, seconds=1.23456)
    opener = SimpleNamespace(pending={2, 3}, opening=3, progress={"counts": progress})
    manager = SimpleNamespace(tasks={1: SimpleNamespace(storage=SimpleNamespace(stores=stores),
                                                        query_views=None)}, opener=opener)
    directory = TaskDirectory(manager, {"counts": SERDES["counts"]})  # type: ignore[arg-type]
    found = directory.locate(1)
    assert isinstance(found, Open) and found.stores["counts"].cache is cache
    waiting = directory.locate(2)
    assert isinstance(waiting, Unavailable) and "waiting to open" in waiting.reason
    restoring = directory.locate(3)
    assert isinstance(restoring, Unavailable) and "restoring" in restoring.reason
    assert restoring.restore == {"counts": {"records": 300, "remaining": 700, "seconds": 1.235}}
    away = directory.locate(4)
    assert isinstance(away, Unavailable)
    assert away.reason == "partition 4 is not assigned to this process (it holds partitions: 1)"


def test_the_server_over_http_and_a_taken_port() -> None:
    import json
    import urllib.error
    import urllib.request

    from millpond.query import QueryError, QueryServer

    cache, view = cached_store()
    cache.put("a", {"n": 1})
    tasks = Tasks({0: {"counts": view}})
    mailbox = Mailbox(timeout_s=5)
    server = QueryServer("127.0.0.1", 0, {"counts": SERDES["counts"]}, mailbox)
    stopped = threading.Event()

    def run_loop() -> None:  # what the job's run loop does once per iteration
        mailbox.open()
        while not stopped.is_set():
            mailbox.serve(tasks)
            stopped.wait(0.01)

    loop = threading.Thread(target=run_loop)
    loop.start()
    server.start()
    try:
        host, port = server.address
        with urllib.request.urlopen(f"http://{host}:{port}/stores/counts/0/get?key=a") as r:
            assert r.headers["Content-Type"] == "application/json"
            assert json.loads(r.read())["value"] == {"n": 1}
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{host}:{port}/stores/x/0/get?key=a")
        assert err.value.code == 404
        assert json.loads(err.value.read())["stores"] == ["counts"]
        with pytest.raises(QueryError, match="cannot listen on 127.0.0.1"):
            QueryServer("127.0.0.1", port, {}, Mailbox())
    finally:
        server.stop()
        stopped.set()
        loop.join(5)
    assert mailbox.ask(Query("counts", 0, "get", keys=(b"a",))).body == {
        "error": "the job is stopping"}


def test_a_key_that_decodes_unhashable_is_read_from_the_dirty_entries() -> None:
    engine = InMemoryEngine()
    json_keys = StoreView(JsonSerde(), JsonSerde(), engine, None)
    cache = CachedStore(SerializedStore(engine, JsonSerde(), JsonSerde(), "t"), "t")
    view = StoreView(json_keys.key_serde, json_keys.msg_serde, engine, cache)
    cache.put(("a", 1), 5)  # a tuple key: json decodes it as a list
    got = answer(Query("t", 0, "get", keys=(b'["a",1]',)), Tasks({0: {"t": view}}))
    assert got.body["entries"] == [{"key": ["a", 1], "value": 5}]


def test_avro_values_render_as_their_fields() -> None:
    import datetime

    from millpond.serdes.avro import AvroSerde

    schema = {"type": "record", "name": "View", "fields": [
        {"name": "user", "type": "string"}, {"name": "raw", "type": "bytes"},
        {"name": "note", "type": ["null", "string"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    avro = AvroSerde(schema)
    engine = InMemoryEngine()
    at = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
    engine.put(b"u1", avro.to_bytes({"user": "u1", "raw": b"\x00\x01", "note": None, "at": at}))
    tasks = Tasks({0: {"views": StoreView(StringSerde(), avro, engine)}})
    parsed = parse_request("/stores/views/0/get?key=u1", {"views": (StringSerde(), avro)})
    assert isinstance(parsed, Query)
    got = single(answer(parsed, tasks)).body
    assert got["value"] == {"user": "u1", "raw": "AAE=", "note": None,
                            "at": "2026-11-26T12:00:00+00:00"}



class Clock:
    """A clock the test moves: each query read moves it on by ``step`` seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.step = 0.0

    def __call__(self) -> float:
        return self.now


def enqueue(mailbox: Mailbox, partitions: range, got: dict[int, Answer]) -> list[threading.Thread]:
    """Ask a get of each partition from its own thread, one after the other (so they wait in
    the partitions' order); each answer lands in ``got``."""
    askers = []
    for p in partitions:
        query = Query("counts", p, "get", keys=(b"a",))
        askers.append(threading.Thread(target=lambda p=p, q=query: got.__setitem__(
            p, mailbox.ask(q))))
        waiting = mailbox.waiting + 1
        askers[-1].start()
        deadline = time.monotonic() + 5
        while mailbox.waiting < waiting:
            assert time.monotonic() < deadline, "the query never reached the mailbox"
            askers[-1].join(0.001)
    return askers


def test_one_iteration_answers_the_queries_within_its_budget_the_rest_next() -> None:
    clock = Clock()
    _, view = cached_store()

    class Slow(Tasks):
        def locate(self, partition: int) -> Open | Unavailable:
            clock.now += clock.step  # the query takes ``step`` of the loop's time
            return super().locate(partition)

    tasks = Slow({p: {"counts": view} for p in range(30)})
    mailbox = Mailbox(timeout_s=30, max_queries=4, budget_s=0.05, clock=clock)
    mailbox.open()
    got: dict[int, Answer] = {}
    askers = enqueue(mailbox, range(10), got)
    assert [mailbox.serve(tasks) for _ in range(3)] == [4, 4, 2]  # at most 4 an iteration
    clock.step = 0.03  # 30 ms a query, 50 ms a budget: a second is begun at 30 ms, no third
    askers += enqueue(mailbox, range(10, 20), got)
    assert [mailbox.serve(tasks) for _ in range(5)] == [2, 2, 2, 2, 2]
    clock.step = 1.0  # longer than the whole budget: still one an iteration, never none
    askers += enqueue(mailbox, range(20, 22), got)
    assert [mailbox.serve(tasks) for _ in range(3)] == [1, 1, 0]
    for asker in askers:
        asker.join(5)
    assert sorted(got) == list(range(22))  # each answered, in the order asked
    assert all(a.status == 200 and a.body["partition"] == p for p, a in got.items())


def test_a_committed_query_reads_the_snapshot_for_keys_written_since(tmp_path: Any) -> None:
    from millpond.stores import RocksDbEngine

    engine = RocksDbEngine(tmp_path / "db")
    try:
        for k in ("a", "b", "c", "d"):
            engine.put(k.encode(), json.dumps(k.upper()).encode())
        snapshot = engine.snapshot()  # the commit
        touched: set[bytes] = set()
        for kb, value in ((b"a", b'"A2"'), (b"b", None), (b"e", b'"E"')):  # evictions since
            engine.write_batch([(kb, value)])
            touched.add(kb)
        cache = CachedStore(SerializedStore(engine, StringSerde(), JsonSerde(), "counts"),
                            "counts")
        cache.put("c", "C2")  # processed, still in the object cache
        view = StoreView(StringSerde(), JsonSerde(), engine, cache, Committed(snapshot, touched))
        tasks = Tasks({0: {"counts": view}})

        def entries(path: str) -> dict[str, str]:
            got = ask(path, tasks)
            assert got.status == 200, got
            return {e["key"]: e["value"] for e in got.body["entries"]}

        assert entries("/stores/counts/0/range") == {"a": "A2", "c": "C2", "d": "D", "e": "E"}
        committed = {"a": "A", "b": "B", "c": "C", "d": "D"}
        assert entries("/stores/counts/0/range?committed=1") == committed
        assert entries("/stores/counts/0/range?committed=1&limit=2&from=b") == {"b": "B",
                                                                              "c": "C"}
        assert entries("/stores/counts/0/prefix?prefix=e&committed=1") == {}
        got = ask("/stores/counts/0/get-many?key=a&key=b&key=c&key=e&committed=1", tasks).body
        assert (got["committed"], got["missing"]) == (True, ["e"])
        assert ask("/stores/counts/0/get?key=b&committed=1", tasks).body == {
            "store": "counts", "partition": 0, "committed": True, "key": "b", "value": "B",
            "found": True}
        assert ask("/stores/counts/0/get?key=b&committed=yes", tasks).status == 400
        plain = Tasks({0: {"counts": cached_store()[1]}})  # an in-memory store: none kept
        assert ask("/stores/counts/0/get?key=b&committed=1", plain).status == 400
        engine.close()  # releases the snapshot: the database closes
        engine = RocksDbEngine(tmp_path / "db")  # its lock is free again
    finally:
        engine.close()


@pytest.mark.parametrize("path", [
    "/stores/counts/get?key=a", "/stores/counts/3/get?key=a", "/stores/counts/get?key=",
    "/stores/counts/get?key=a+b", "/stores/counts/get?key=a%2Fb%26c%3D", "/stores/n/1/get?key=42",
    "/stores/n/get?key=x", "/stores/c%6Funts/get?key=%E2%82%AC", "/stores/counts/x/get?key=a",
    "/stores/counts/get?key=a&key=b", "/stores/counts/get?key=a&committed=1",
    "/stores/counts/get/?key=a", "/stores//counts/get?key=a", "/stores/counts/get?k=a",
    "/stores/counts/get", "/stores/counts/range?key=a", "/stores/counts/1/2/get?key=a",
    "/stores/counts/get?key=a#frag", "/stores/nope/get?key=a",
])
def test_the_run_loops_plain_get_reads_a_path_as_the_general_parser_does(path: str) -> None:
    """_plain_get (the run loop's parse of the common query) takes a path only when the
    general parser would ask the same one key of the same store and partition."""
    from millpond.query.render import BadKey, parse_key
    from millpond.query.server import _plain_get

    fast = _plain_get(path)
    if fast is None:
        return  # left to the general parser: nothing to agree on
    store, partition, text = fast
    head, _, query = path.partition("?")
    general = parse_request(f"/stores/{head.split('/')[2]}/{partition or 0}/get?{query}",
                            SERDES)
    if store not in SERDES:
        assert isinstance(general, Answer) and general.status == 404
        return
    try:
        key = parse_key(SERDES[store][0], text)
    except BadKey:
        assert isinstance(general, Answer) and general.status == 400
        return
    assert isinstance(general, Query), general
    assert (general.store, general.partition, general.keys, general.committed) == \
        (store, partition or 0, (key,), False)


def test_the_run_loops_one_key_get_answers_as_the_general_path_does() -> None:
    """get_one (the run loop's short path for a one-key get) gives what the general path
    and ``single`` give together, for every way a key can be held or refused."""
    from millpond.query.reads import get_one

    cache, view = cached_store()
    cache.put_all([("clean", 1), ("gone", 2)])
    cache.flush()
    cache.put("dirty", {"n": [1, 2]})
    cache.delete("gone")  # a dirty delete over the engine's value
    view.engine.put(b"engine", b"3")  # only in the engine
    json_keys = StoreView(JsonSerde(), JsonSerde(), view.engine, cached_store(JsonSerde())[0])
    tasks = Tasks({0: {"counts": view, "json": json_keys}})
    asked = [("counts", 0, key) for key in (b"clean", b"dirty", b"gone", b"engine", b"none")]
    asked += [("json", 0, b'["a", 1]'), ("counts", 1, b"clean"), ("n", 0, b"1")]
    for store, partition, kb in asked:
        general = single(answer(Query(store, partition, "get", keys=(kb,)), tasks))
        assert get_one(store, partition, kb, tasks) == general, (store, partition, kb)
    assert get_one("counts", 0, b"dirty", tasks).body["value"] == {"n": [1, 2]}
    assert get_one("counts", 0, b"gone", tasks).body["found"] is False
    assert get_one("counts", 1, b"clean", tasks).status == 503
    assert get_one("n", 0, b"1", tasks).status == 404


def test_the_task_directory_makes_a_tasks_views_again_only_when_it_commits_or_reopens() -> None:
    """The run loop's directory keeps an open task's views between queries (on the task),
    and makes them again when a commit moves what committed reads see or the task is opened
    anew."""
    from types import SimpleNamespace

    from millpond.tasks.queries import TaskDirectory

    cache, view = cached_store()
    logged = SimpleNamespace(touched={b"a"})
    store = SimpleNamespace(engine=view.engine, cache=cache, snapshot=object(), logged=logged)

    def instance() -> Any:
        return SimpleNamespace(storage=SimpleNamespace(stores={"counts": store}),
                               query_views=None)

    manager = SimpleNamespace(tasks={0: instance()},
                              opener=SimpleNamespace(pending=set(), opening=None, progress={}))
    directory = TaskDirectory(manager, {"counts": SERDES["counts"]})  # type: ignore[arg-type]
    first = directory.locate(0)
    assert isinstance(first, Open) and directory.locate(0) is first
    committed = first.stores["counts"].committed
    assert committed is not None and committed.snapshot is store.snapshot
    store.snapshot = object()  # a commit: a new snapshot, a new set of keys written since
    logged.touched = set()
    after_commit = directory.locate(0)
    assert isinstance(after_commit, Open) and after_commit is not first
    committed = after_commit.stores["counts"].committed
    assert committed is not None and committed.snapshot is store.snapshot
    assert committed.touched is logged.touched
    logged.touched = None  # too many keys written since the commit to follow
    overflowed = directory.locate(0)
    assert isinstance(overflowed, Open) and overflowed is not after_commit
    assert overflowed.stores["counts"].committed == Committed(store.snapshot, None)
    manager.tasks = {0: instance()}  # revoked and opened again
    reopened = directory.locate(0)
    assert isinstance(reopened, Open) and reopened is not overflowed
    assert manager.tasks[0].query_views is reopened  # kept on the task: they go with it


def test_a_busy_run_loop_lets_requests_linger_then_answers_them_together() -> None:
    """job.query.linger.ms: while the loop is busy it turns to the connections at most once
    per linger; requests that came meanwhile wait, and the next turn answers them all."""
    import select
    import socket

    from millpond.query.server import QueryServer

    cache, view = cached_store()
    cache.put("a", 1)
    tasks = Tasks({0: {"counts": view}})
    server = QueryServer("127.0.0.1", 0, SERDES, Mailbox(), linger_s=60.0)  # no watchdog
    socks: list[socket.socket] = []
    try:
        server.pump(tasks, busy=True)  # a turn: the next busy one is a minute away
        socks = [socket.create_connection(server.address, timeout=5) for _ in range(3)]
        for s in socks:
            s.sendall(b"GET /stores/counts/0/get?key=a HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(20):  # busy iterations within the linger: nothing is served
            server.pump(tasks, busy=True)
        readable, _, _ = select.select(socks, [], [], 0.2)
        assert readable == [] and server.pumped == 0
        deadline = time.monotonic() + 5
        while server.pumped < 3 and time.monotonic() < deadline:
            server.pump(tasks, busy=False)  # idle: every iteration serves
        assert server.pumped == 3
        for s in socks:
            s.settimeout(5)
            data = b""
            while not data.endswith(b"}"):
                chunk = s.recv(4096)
                assert chunk, "closed before the answer"
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert json.loads(body) == {"store": "counts", "partition": 0, "key": "a",
                                        "value": 1, "found": True}
    finally:
        for s in socks:
            s.close()
        server.stop()

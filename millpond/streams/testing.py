"""Testing a dataflow without Kafka: :class:`TestDriver` (Kafka Streams' TopologyTestDriver
is the model) runs an app in-process on the same fused operator code the tasks run.

Pipe records into its sources, read what its sinks sent, look into its stores::

    driver = TestDriver(app)
    driver.pipe("page-views", "alice", {"user_id": "alice"})
    assert driver.read("user-counts") == [("alice", 1)]
    assert driver.state("counts") == {"alice": 1}

Records carry event timestamps (``pipe(..., timestamp=...)``, else :attr:`TestDriver.now`);
:meth:`TestDriver.advance_time` moves processing time and fires processing-time timers;
:meth:`TestDriver.restarted` is the app started again over the same stores (as a task reopened
from its changelog after a crash), for tests that what an operator keeps only in memory is not
needed to go on.
Stores hold what a JSON store would give back (a tuple comes back a list; a value JSON cannot
hold fails here as it would in the job); a ``key_by`` hands each record on at once, through
JSON as its internal topic would; a record piped into a global table's topic goes straight
into its store, as the job's side-input processor puts it. Commits, transactions, restore,
partitions and the broker are not simulated: test those against a real broker
(`millpond run`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from millpond.serdes.builtins import JsonSerde
from millpond.streams.dataflow import App, Node
from millpond.streams.errors import DataflowError
from millpond.streams.runtime import Clock, Step, bind, chains
from millpond.streams.timers import timers_store

_JSON = JsonSerde("json")


class MemoryStore:
    """A key-value store in a dict whose values make a JSON round trip, as in the job."""

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}

    def range(self, start: Any, end: Any) -> AbstractContextManager[Iterator[tuple[Any, Any]]]:
        """Entries with ``start <= key < end`` in key order (as a store's range scan)."""
        return nullcontext(iter(sorted((k, v) for k, v in self.data.items()
                                       if start <= k < end)))

    def get(self, key: Any) -> Any:
        return self.data.get(key)

    def get_all(self, keys: Iterable[Any]) -> dict[Any, Any]:
        return {key: self.data[key] for key in keys if key in self.data}

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = _JSON.from_bytes(_JSON.to_bytes(value))

    put_new = put  # (a key known to hold no value: KeyValueStore.put_new)

    def delete(self, key: Any) -> None:
        self.data.pop(key, None)

    def delete_all(self, keys: Iterable[Any]) -> None:
        for key in keys:
            self.data.pop(key, None)


class TestDriver:
    """Runs ``app`` in-process: ``pipe`` records in, ``read`` what it sent, ``state`` of
    its stores."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, app: App, start_time: int = 0, *,
                 stores: Mapping[str, Mapping[Any, Any]] | None = None) -> None:
        """``stores``: what stores hold at the start (store name -> key -> state)."""
        self.app = app
        self.now = start_time  # processing time (ms): advance it with advance_time()
        self.clock = Clock(lambda: self.now)
        self.late_records: dict[str, int] = {}  # window operator -> late records it dropped
        self._stores = {name: MemoryStore() for name in app.stores}
        for name, node in app.stores.items():
            if node.kind == "process":
                self._stores[timers_store(name)] = MemoryStore()
        for name, data in (stores or {}).items():
            self.store(name).data.update(data)
        self._outputs: dict[str, list[tuple[Any, Any, int]]] = {t: [] for t in app.sinks}
        self._internal = {self.internal_topic(name) for name in app.repartitions}
        self._chains = chains(app, self)
        for table in app.global_tables.values():  # side inputs: straight into the stores
            topic = table.topic or ""
            self._chains[topic] = self._side_input(topic)

    # Env, for the operators
    def store(self, name: str) -> Any:
        """The store of stateful operator ``name`` (``get``/``put``/``delete``); compare it
        with a dict through ``state``."""
        try:
            return self._stores[name]
        except KeyError:
            raise DataflowError(f"the app has no stateful operator named {name!r} (it has: "
                                f"{', '.join(sorted(self._stores)) or 'none'})") from None

    def send(self, topic: str, key: Any, value: Any, timestamp: int) -> None:
        if topic in self._internal:  # a key_by: straight on, as the task that owns the key
            self.pipe(topic, _JSON.from_bytes(_JSON.to_bytes(key)),
                      _JSON.from_bytes(_JSON.to_bytes(value)), timestamp)
            return
        self._outputs[topic].append((key, value, timestamp))

    def internal_topic(self, name: str) -> str:
        return f"{name}-repartition"

    def _side_input(self, topic: str) -> Step:
        """A record of ``topic`` into the stores of the global tables it fills, as the job's
        side-input processor (``KeyValueProcessor``) puts it: the latest value per key (the
        table operator's writes), a null value deleting the key, a record without a key
        skipped."""
        tables = [bind(Node("table", name, name=name), self)
                  for name, table in self.app.global_tables.items() if table.topic == topic]

        def fill(key: Any, value: Any, ts: int) -> None:
            if key is not None:
                for table in tables:
                    table(key, value, ts)
        return fill

    def late(self, operator: str) -> None:
        self.late_records[operator] = self.late_records.get(operator, 0) + 1

    # the test's side
    def pipe(self, topic: str, key: Any, value: Any, timestamp: int | None = None) -> None:
        """One record into source ``topic``; its event time is ``timestamp`` (ms), else the
        driver's processing time :attr:`now`."""
        chain = self._chains.get(topic)
        if chain is None:
            raise DataflowError(f"the app reads no topic {topic!r} (it reads: "
                                f"{', '.join(sorted(self._chains))})")
        chain(key, value, self.now if timestamp is None else timestamp)

    def pipe_all(self, topic: str, records: Iterable[tuple[Any, ...]]) -> None:
        """Each ``(key, value)`` or ``(key, value, timestamp)`` into source ``topic``, in
        order."""
        for record in records:
            self.pipe(topic, *record)

    def advance_time(self, ms: int) -> None:
        """Move processing time on by ``ms`` and fire the processing-time timers due, as a
        task's ``window()`` would."""
        self.now += ms
        self.clock.fire_processing(self.now)

    def read(self, topic: str, timestamps: bool = False) -> list[tuple[Any, ...]]:
        """What the app sent to ``topic`` since the last read, as ``(key, value)`` (with
        ``timestamps``: ``(key, value, timestamp)``)."""
        if topic not in self._outputs:
            raise DataflowError(f"the app sends to no topic {topic!r} (it sends to: "
                                f"{', '.join(sorted(self._outputs)) or 'none'})")
        out, self._outputs[topic] = self._outputs[topic], []
        return out if timestamps else [(key, value) for key, value, _ in out]

    def state(self, name: str) -> dict[Any, Any]:
        """Every key's state in stateful operator ``name``'s store."""
        return dict(self.store(name).data)

    def restarted(self) -> TestDriver:
        """A new driver of the same app over a copy of this one's stores, its operators made
        afresh (what they kept only in memory is gone), at the same processing time: the
        job after a crash, restored from its changelogs (here: everything written so far,
        as at a commit)."""
        stores = {name: copy.deepcopy(store.data) for name, store in self._stores.items()}
        return TestDriver(self.app, self.now, stores=stores)

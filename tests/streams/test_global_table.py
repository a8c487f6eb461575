"""Global tables (``app.global_table``): every partition of a topic in every task's store,
filled as a broadcast side input, joined by the record's key or a key made from its value.

The driver runs the app's operators and the side-input processor the job uses; the
compiled config is checked against the side-input runtime's own partition check (a stream
of 2 partitions joined with a table of 3). tests/streams/test_global_table_job.py runs it
on the broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond.config import Config, ConfigError
from millpond.sideinputs.errors import SideInputsConfigError
from millpond.sideinputs.runtime import SideInputs
from millpond.sideinputs.sources import sources
from millpond.streams import App, DataflowError, OperatorError, TestDriver, describe
from millpond.streams.compile import load_config
from tests.streams.apps import order_regions
from tests.streams.test_joins import _app


def test_a_left_join_passes_none_for_a_missing_or_deleted_key() -> None:
    """A deleted key and a record without a key (skipped, as the job's side-input processor
    skips it); the inner and left joins that follow a table's updates are
    tests/streams/test_joins.py's, run for both kinds of table."""
    driver = TestDriver(_app("left", "global_table"))
    driver.pipe_all("profiles", [("bob", {"zip": "20095"}), ("cat", {"zip": "01067"}),
                                 ("cat", None), (None, {"zip": "no key: skipped"})])
    driver.pipe_all("views", [("ann", {"page": "/a"}), ("bob", {"page": "/b"}),
                              ("cat", {"page": "/c"})])
    assert driver.read("out") == [("ann", {"page": "/a", "zip": None}),
                                  ("bob", {"page": "/b", "zip": "20095"}),
                                  ("cat", {"page": "/c", "zip": None})]
    assert driver.state("user-zips") == {"bob": {"zip": "20095"}}


def test_key_looks_up_a_key_made_from_the_value_and_keeps_the_records_key() -> None:
    app = App()
    customers = app.global_table("customers", "customers")
    (app.source("orders")
     .join(customers, lambda order, c: [order["id"], c["region"]],
           key=lambda order: order.get("customer"))
     .to("out"))
    driver = TestDriver(app)
    driver.pipe_all("customers", [("c1", {"region": "eu"}), ("c2", {"region": "us"})])
    driver.pipe_all("orders", [("o1", {"id": 1, "customer": "c2"}),
                               ("o2", {"id": 2, "customer": "c9"}),  # unknown: dropped
                               ("o3", {"id": 3}),  # key None: finds nothing
                               ("c1", {"id": 4, "customer": "c1"})])
    driver.pipe("customers", "c2", {"region": "ap"})
    driver.pipe("orders", "o5", {"id": 5, "customer": "c2"})
    assert driver.read("out") == [("o1", [1, "us"]), ("c1", [4, "eu"]), ("o5", [5, "ap"])]
    with pytest.raises(OperatorError, match=r"join #\d+ \(from orders\) key raised AttributeError"):
        driver.pipe("orders", "o6", "not a dict")


def test_what_a_global_table_may_not_be() -> None:
    app = App()
    table = app.table("t", "tab")
    with pytest.raises(DataflowError, match="key= needs a global table"):
        app.source("s").join(table, lambda v, t: v, key=lambda v: v)
    glob = app.global_table("g", "glob")
    with pytest.raises(DataflowError, match="must be functions"):
        app.source("s").join(glob, lambda v, t: v, key="id")  # type: ignore[arg-type]
    with pytest.raises(DataflowError, match="it is the topic of global table 'glob'"):
        app.source("g")
    with pytest.raises(DataflowError, match="t is also a source of the app"):
        app.global_table("t", "other")
    with pytest.raises(DataflowError, match="two operators are named 'tab'"):
        app.global_table("h", "tab")


BASE = ("job.name=shop\napp.class=tests.streams.apps:order_regions\n"
        "systems.kafka.bootstrap.servers=127.0.0.1:1\n"
        "systems.kafka.samza.key.serde=string\nsystems.kafka.samza.msg.serde=json\n")


def _compiled(tmp_path: Path, extra: str = "") -> Config:
    path = tmp_path / "app.properties"
    path.write_text(BASE + extra)
    return load_config(path)


def test_the_store_is_an_ordinary_store_filled_whole_as_a_side_input(tmp_path: Path) -> None:
    config = _compiled(tmp_path, "stores.customers.object.cache.size=7\n")
    store = config.stores["customers"]
    assert [ref.topic for ref in config.job.inputs] == ["orders"]  # no input of the task
    assert [ref.topic for ref in store.side_inputs] == ["customers"]
    assert store.side_inputs_broadcast and store.changelog is None
    assert store.side_inputs_processor == "millpond.sideinputs.KeyValueProcessor"
    assert (store.factory, store.key_serde, store.msg_serde, store.object_cache_size) == (
        "rocksdb", "string", "json", 7)
    assert describe.text(order_regions(config), config).endswith(
        "side input customers\n"
        "  -> global table (every partition, in every task): customers (store customers)\n")


def test_its_side_input_keys_and_a_changelog_are_refused_at_their_line(tmp_path: Path) -> None:
    with pytest.raises(DataflowError, match=r"app.properties:6: stores.customers.side.inputs."
                                            r"broadcast=false: .* so it is true"):
        _compiled(tmp_path, "stores.customers.side.inputs.broadcast=false\n")
    with pytest.raises(ConfigError, match="cannot have a changelog"):
        _compiled(tmp_path, "stores.customers.changelog=kafka.customers-log\n")


def test_a_stream_of_two_partitions_joins_a_table_of_three(tmp_path: Path) -> None:
    """No co-partitioning: the side-input check the job runs at start accepts a global
    table's topic of any count (a per-task side input of 3 partitions in a job of 2 tasks is
    refused), and each of the 2 tasks reads all 3 partitions."""
    config = _compiled(tmp_path)
    counts = {"customers": 3, "orders": 2}.get
    side = SideInputs(config, {"bootstrap.servers": "127.0.0.1:1"}, "read_committed",
                      lambda topic: (None, None))
    side.check_partitions(counts, tasks=2)
    store = config.stores["customers"]
    for task in (0, 1):
        assert sources(store, task, counts) == {
            "customers#0": ("customers", 0), "customers#1": ("customers", 1),
            "customers#2": ("customers", 2)}
    per_task = _compiled(tmp_path, "stores.lookup.factory=rocksdb\n"
                         "stores.lookup.key.serde=string\nstores.lookup.msg.serde=json\n"
                         "stores.lookup.side.inputs=kafka.customers\n"
                         "stores.lookup.side.inputs.processor.factory="
                         "millpond.sideinputs.KeyValueProcessor\n")
    assert sources(per_task.stores["lookup"], 1, counts) == {"customers": ("customers", 1)}
    with pytest.raises(SideInputsConfigError, match="has 3 partitions, the job has 2 tasks"):
        SideInputs(per_task, {}, "read_committed", lambda topic: (None, None)
                   ).check_partitions(counts, tasks=2)
    with pytest.raises(SideInputsConfigError, match="customers does not exist"):
        sources(store, 0, {}.get)

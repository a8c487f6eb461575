"""The dataflow_driver fixture millpond registers with pytest (its pytest11 entry point)."""

from __future__ import annotations

from collections.abc import Callable

from millpond.streams import App, TestDriver


def test_the_fixture_makes_a_driver_per_app(dataflow_driver: Callable[[App], TestDriver]) -> None:
    from tests.streams.apps import counts

    driver = dataflow_driver(counts)
    driver.pipe("page-views", "alice", {"user_id": "alice"})
    assert driver.read("user-counts") == [("alice", 1)]
    assert dataflow_driver(counts).state("counts") == {}  # a new driver: fresh stores

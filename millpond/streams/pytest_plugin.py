"""The pytest fixture for testing dataflow apps (registered as a pytest plugin when millpond
is installed): ``dataflow_driver(app)`` returns a :class:`~millpond.streams.TestDriver`::

    def test_counts(dataflow_driver):
        driver = dataflow_driver(app)
        driver.pipe("page-views", "alice", {"user_id": "alice"})
        assert driver.read("user-counts") == [("alice", 1)]
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from millpond.streams.dataflow import App
from millpond.streams.testing import TestDriver


@pytest.fixture
def dataflow_driver() -> Callable[[App], TestDriver]:
    """A factory of test drivers: one per app, each with fresh stores and outputs."""
    return TestDriver

"""TopicAdmin.ensure_compacted after creating a topic waits a bounded time for metadata to
show it, instead of calling itself again without a bound."""

from __future__ import annotations

from typing import Any

import pytest

import millpond.kafka.admin as admin_module
from millpond.kafka.admin import TopicAdmin
from millpond.kafka.errors import TopicError


class _Done:
    def result(self, timeout: float | None = None) -> None:
        return None


class _FakeClient:
    def __init__(self) -> None:
        self.creates = 0

    def create_topics(self, topics: list[Any]) -> dict[str, _Done]:
        self.creates += 1
        return {t.topic: _Done() for t in topics}


def _admin(counts: list[int | None]) -> tuple[TopicAdmin, _FakeClient]:
    admin = TopicAdmin.__new__(TopicAdmin)  # no client: the calls are faked below
    client = _FakeClient()
    admin.admin = client  # type: ignore[assignment]
    seen = iter(counts)
    admin.partition_count = lambda topic: next(seen, counts[-1])  # type: ignore[method-assign]
    admin.broker_count = lambda: 1  # type: ignore[method-assign]
    admin.topic_config = lambda topic: {"cleanup.policy": "compact"}  # type: ignore[method-assign]
    return admin, client


def test_metadata_that_never_shows_the_topic_is_an_error_not_a_recursion(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: RecursionError after ~1000 create_topics calls.
    monkeypatch.setattr(admin_module, "TIMEOUT", 0.3)
    admin, client = _admin([None])
    with pytest.raises(TopicError, match="created but the cluster's metadata did not show it"):
        admin.ensure_compacted("t", 4)
    assert client.creates == 1


def test_metadata_that_lags_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    admin, client = _admin([None, None, None, 4])
    admin.ensure_compacted("t", 4)
    assert client.creates == 1
    admin, client = _admin([None, 2])
    with pytest.raises(TopicError, match="has 2 partitions but the job has 4"):
        admin.ensure_compacted("t", 4)

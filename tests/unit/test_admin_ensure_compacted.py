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


def test_a_topic_it_created_is_not_described_again() -> None:
    """The policy of a topic this call created is the one it asked for (one DescribeConfigs
    round trip less at a new job's start); an existing topic's is read from the broker."""
    described: list[str] = []

    def topic_config(topic: str) -> dict[str, str]:
        described.append(topic)
        return {"cleanup.policy": "delete"}

    admin, client = _admin([None, 4])
    admin.topic_config = topic_config  # type: ignore[method-assign]
    admin.ensure_compacted("new", 4)
    assert client.creates == 1 and described == []
    looked: list[str] = []

    def partition_count(topic: str) -> int | None:  # "new2" is missing at the first look
        looked.append(topic)
        return None if looked.count(topic) == 1 and topic == "new2" else 4

    admin.partition_count = partition_count  # type: ignore[method-assign]
    with pytest.raises(TopicError, match="cleanup.policy=delete"):  # asked for by the store
        admin.ensure_compacted("new2", 4, config={"cleanup.policy": "delete"})
    with pytest.raises(TopicError, match="cleanup.policy=delete"):  # read back: not compacted
        admin.ensure_compacted("old", 4)
    assert described == ["old"]

"""The run loop's memory watch: each status line reports RSS against the budget (what the
process held, as a container counts it) and the peak, then gives freed heap memory back to
the OS."""

from __future__ import annotations

import pytest

from millpond.config import Config
from millpond.config.properties import parse_properties
from millpond.tasks import memory


def test_each_status_line_reads_rss_then_trims_the_heap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append("trim") or True)
    monkeypatch.setattr(memory, "rss_bytes", lambda: calls.append("rss") or 100 * memory.MiB)
    monkeypatch.setattr(memory, "peak_rss_bytes", lambda: 150 * memory.MiB)
    plan = Config.from_properties(parse_properties(
        "job.name=j\ntask.class=a.B\ntask.inputs=kafka.t\n"
        "systems.kafka.bootstrap.servers=h:9092\njob.container.memory.mb=384\n",
        "job.properties")).memory
    watch = memory.MemoryWatch(plan)
    assert watch.status() == "rss 100 MiB of 384 MiB, peak 150 MiB"
    assert watch.status() == "rss 100 MiB of 384 MiB, peak 150 MiB"
    assert calls == ["rss", "trim", "rss", "trim"]

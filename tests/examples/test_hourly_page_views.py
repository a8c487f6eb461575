"""Example 1 end to end: hourly page views per user, SIGKILLed mid-stream, a store lost."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import create_topics, page_views, produce
from examples.reference import hourly_counts
from tests.examples.helpers import (
    crash_mid_stream,
    delete_store_dir,
    dump,
    example_config,
    finish,
    latest_by_key,
    merged,
    outputs,
)

pytestmark = pytest.mark.kafka


def test_hourly_page_views_survive_a_kill_and_a_lost_store(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    views_topic, out_topic = topic_name("views"), topic_name("hourly")
    create_topics(kafka_bootstrap, {views_topic: 4, out_topic: 4})
    views = page_views(seed=11, events=20_000, users=50, hours=6, partitions=4)
    produce(kafka_bootstrap, views_topic, views)
    config = example_config(
        "hourly-page-views", tmp_path, kafka_bootstrap, topic_name,
        {"page-views": views_topic, "hourly-page-views": out_topic},
        task__commit__ms=0)

    committed = crash_mid_stream(config, "mid-batch:6", len(views))
    # The busiest task loses its counts store and must restore it from the changelog.
    lost = max(committed, key=committed.__getitem__)
    delete_store_dir(config, "hourly-counts", lost)
    log = finish(config)
    assert re.search(rf"task partition-{lost} ready: restored [1-9]", log), log[-3000:]

    expected = hourly_counts(views)
    assert expected.late > 0 and expected.closed and expected.open
    assert merged(dump(config, "hourly-counts")) == expected.open
    assert dump(config, "event-time") == {
        p: {"watermark": wm} for p, wm in expected.watermarks.items()}
    emitted = latest_by_key(outputs(kafka_bootstrap, out_topic))
    assert {k: v["views"] for k, v in emitted.items()} == expected.closed
    assert all(k == f"{v['hour']}|{v['user_id']}" for k, v in emitted.items())

"""Example 4 end to end: clicks joined to impressions within 10 minutes, killed mid-stream."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import ad_events, create_topics, produce
from examples.reference import ad_join
from tests.examples.helpers import (
    crash_mid_stream,
    dump,
    example_config,
    finish,
    latest_by_key,
    merged,
    outputs,
)

pytestmark = pytest.mark.kafka


def test_ad_click_join_survives_a_kill(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    imps_topic, clicks_topic = topic_name("impressions"), topic_name("clicks")
    out_topic = topic_name("joined")
    create_topics(kafka_bootstrap, {imps_topic: 4, clicks_topic: 4, out_topic: 4})
    impressions, clicks = ad_events(seed=15, impressions=6_000, click_rate=0.4, partitions=4)
    produce(kafka_bootstrap, imps_topic, impressions)
    produce(kafka_bootstrap, clicks_topic, clicks)
    config = example_config(
        "ad-click-join", tmp_path, kafka_bootstrap, topic_name,
        {"ad-impressions": imps_topic, "ad-clicks": clicks_topic, "ad-click-joins": out_topic},
        task__commit__ms=0, task__window__ms=50)

    crash_mid_stream(config, "mid-batch:4", len(impressions) + len(clicks))
    finish(config)

    expected = ad_join(impressions, clicks)
    late_clicks = sum(1 for c in clicks if c.key not in expected.joined)
    assert expected.joined and late_clicks, "some clicks join, some come too late or orphaned"
    assert merged(dump(config, "impressions")) == expected.impressions
    assert merged(dump(config, "clicks")) == expected.clicks
    assert dump(config, "join-expiry") == expected.expiry
    # At-least-once output: duplicates after the kill carry the same value; dedupe by key.
    assert latest_by_key(outputs(kafka_bootstrap, out_topic)) == expected.joined

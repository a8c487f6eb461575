"""Example 4 as a streams app (examples/ad_click_join_app.py) beside the StreamTask version
(examples/ad_click_join.py) on the same events: the same joins; the app (exactly-once,
SIGKILLed mid-stream) sends each once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import ad_events, create_topics, produce
from examples.reference import ad_join
from tests.examples.helpers import crash_mid_stream, example_config, finish, latest_by_key, outputs

pytestmark = pytest.mark.kafka


def test_the_app_joins_as_the_streamtask_does(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    imps, clicks_topic = topic_name("impressions"), topic_name("clicks")
    app_out, task_out = topic_name("app-joined"), topic_name("task-joined")
    create_topics(kafka_bootstrap, {imps: 4, clicks_topic: 4, app_out: 4, task_out: 4})
    impressions, clicks = ad_events(seed=15, impressions=3_000, click_rate=0.4, partitions=4)
    produce(kafka_bootstrap, imps, impressions)
    produce(kafka_bootstrap, clicks_topic, clicks)
    (tmp_path / "app").mkdir()
    (tmp_path / "task").mkdir()
    inputs = {"ad-impressions": imps, "ad-clicks": clicks_topic}
    app = example_config("ad-click-join-app", tmp_path / "app", kafka_bootstrap, topic_name,
                         {**inputs, "ad-click-joins": app_out},
                         job__name=topic_name("app-job"), task__commit__ms=0)
    task = example_config("ad-click-join", tmp_path / "task", kafka_bootstrap, topic_name,
                          {**inputs, "ad-click-joins": task_out}, task__window__ms=50)
    crash_mid_stream(app, "mid-batch:4", len(impressions) + len(clicks))
    finish(app)
    finish(task)

    expected = ad_join(impressions, clicks)
    assert expected.joined
    app_rows = outputs(kafka_bootstrap, app_out, "read_committed")
    assert max(Counter(key for key, _ in app_rows).values()) == 1  # each join once
    assert dict(app_rows) == latest_by_key(outputs(kafka_bootstrap, task_out)) == expected.joined

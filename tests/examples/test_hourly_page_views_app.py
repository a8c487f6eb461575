"""Example 1 as a streams app (examples/hourly_page_views_app.py) beside the StreamTask version
(examples/hourly_page_views.py) on the same views: the same hourly counts, keyed alike; the
app (exactly-once, SIGKILLed mid-stream) sends each closed hour once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import create_topics, page_views, produce
from examples.reference import hourly_counts
from tests.examples.helpers import crash_mid_stream, example_config, finish, latest_by_key, outputs

pytestmark = pytest.mark.kafka


def test_the_app_counts_hours_as_the_streamtask_does(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    views_topic, app_out, task_out = topic_name("views"), topic_name("app"), topic_name("task")
    create_topics(kafka_bootstrap, {views_topic: 4, app_out: 4, task_out: 4})
    views = page_views(seed=11, events=8_000, users=30, hours=4, partitions=4)
    produce(kafka_bootstrap, views_topic, views)
    (tmp_path / "app").mkdir()
    (tmp_path / "task").mkdir()
    app = example_config("hourly-page-views-app", tmp_path / "app", kafka_bootstrap,
                         topic_name, {"page-views": views_topic, "hourly-page-views": app_out},
                         job__name=topic_name("app-job"), task__commit__ms=0)
    task = example_config("hourly-page-views", tmp_path / "task", kafka_bootstrap, topic_name,
                          {"page-views": views_topic, "hourly-page-views": task_out})
    crash_mid_stream(app, "mid-batch:4", len(views))
    finish(app)
    finish(task)

    expected = hourly_counts(views)
    assert expected.late > 0 and expected.closed and expected.open
    app_rows = outputs(kafka_bootstrap, app_out, "read_committed")
    assert max(Counter(key for key, _ in app_rows).values()) == 1  # each hour once
    assert dict(app_rows) == latest_by_key(outputs(kafka_bootstrap, task_out))
    assert {key: row["views"] for key, row in app_rows} == expected.closed

"""The page-view counter as a streams app (examples/page_view_app.py) beside the StreamTask
version (examples/page_view_counter.py), on the same input: the same counts in their stores,
the same last count per user in their outputs; the app's output holds every count."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import create_topics, page_views, produce
from tests.examples.helpers import dump, example_config, finish, merged, outputs

pytestmark = pytest.mark.kafka


def test_the_app_counts_as_the_streamtask_does(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    views, app_out, task_out = topic_name("views"), topic_name("app-out"), topic_name("task-out")
    create_topics(kafka_bootstrap, {views: 4, app_out: 4, task_out: 4})
    records = page_views(seed=5, events=4_000, users=30, hours=1)
    produce(kafka_bootstrap, views, records)
    (tmp_path / "app").mkdir()
    (tmp_path / "task").mkdir()
    app = example_config("page-view-app", tmp_path / "app", kafka_bootstrap, topic_name,
                         {"page-views": views, "user-counts": app_out},
                         job__name=topic_name("app-job"))
    task = example_config("page-view-counter", tmp_path / "task", kafka_bootstrap, topic_name,
                          {"page-views": views, "user-counts": task_out})
    finish(app)
    finish(task)
    expected = Counter(r.key for r in records)
    app_state = merged(dump(app, "page-view-counts"))
    assert app_state == merged(dump(task, "page-view-counts")) == dict(expected)
    app_counts = outputs(kafka_bootstrap, app_out)
    assert dict(app_counts) == dict(outputs(kafka_bootstrap, task_out))  # the last per user
    assert sorted(app_counts) == sorted((u, i) for u, n in expected.items()
                                        for i in range(1, n + 1))

"""Example 3 as a streams app (examples/page_view_zip_app.py) beside the StreamTask version
(examples/page_view_zip_enricher.py) on the same inputs: the same views enriched once each,
keyed by ZIP code, and the same views still waiting for a profile."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import create_topics, page_views, produce, profile_updates, zip_views
from examples.reference import zip_enrichment
from tests.examples.helpers import dump, example_config, finish, merged, outputs

pytestmark = pytest.mark.kafka


def test_the_app_enriches_as_the_streamtask_does(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    profiles_topic, views_topic = topic_name("profiles"), topic_name("views")
    app_out, task_out = topic_name("app-by-zip"), topic_name("task-by-zip")
    create_topics(kafka_bootstrap, {profiles_topic: 4, views_topic: 4, app_out: 4, task_out: 4})
    (tmp_path / "app").mkdir()
    (tmp_path / "task").mkdir()
    inputs = {"user-profiles": profiles_topic, "page-views": views_topic}
    app = example_config("page-view-zip-app", tmp_path / "app", kafka_bootstrap, topic_name,
                         {**inputs, "page-views-by-zip": app_out},
                         job__name=topic_name("app-job"))
    task = example_config("page-view-zip-enricher", tmp_path / "task", kafka_bootstrap,
                          topic_name, {**inputs, "page-views-by-zip": task_out})

    # Phase 1: 36 of 40 users have a profile; phase 2: ten move, two of the four without a
    # profile get one (their waiting views go out), the others keep viewing.
    profiles1, views1 = zip_views(seed=13, users=40, views=3_000, without_profile=4)
    users = [f"user-{n:03d}" for n in range(40)]
    profiles2 = profile_updates(99, users[:10] + users[36:38])
    views2 = page_views(seed=14, events=1_000, partitions=4, first_view=len(views1),
                        late_fraction=0.0, user_ids=users[10:])
    for profiles, views in [(profiles1, views1), (profiles2, views2)]:
        produce(kafka_bootstrap, profiles_topic, profiles)
        produce(kafka_bootstrap, views_topic, views)
        finish(app)
        finish(task)

    expected = zip_enrichment([(profiles1, views1), (profiles2, views2)])
    app_records = outputs(kafka_bootstrap, app_out, "read_committed")
    task_records = outputs(kafka_bootstrap, task_out, "read_committed")
    assert max(Counter(view["view_id"] for _, view in app_records).values()) == 1
    assert {view["view_id"]: view for _, view in app_records} == expected.enriched
    assert sorted(app_records, key=lambda kv: kv[1]["view_id"]) == \
        sorted(task_records, key=lambda kv: kv[1]["view_id"])
    assert all(key == view["zip"] for key, view in app_records)
    # what still waits: the app keeps it per user, the StreamTask per user|view
    waiting = {f"{user}|{view['view_id']}": view
               for user, state in merged(dump(app, "user-zips")).items()
               for view in state.get("pending", [])}
    assert waiting == expected.pending == merged(dump(task, "pending-views"))

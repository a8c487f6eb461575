"""Example 3 end to end: page views enriched with ZIP codes, killed mid-stream, then updates."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import create_topics, page_views, produce, profile_updates, zip_views
from examples.reference import zip_enrichment
from tests.examples.helpers import crash_mid_stream, dump, example_config, finish, merged, outputs

pytestmark = pytest.mark.kafka


def test_zip_enrichment_is_exactly_once_across_a_kill(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    profiles_topic, views_topic = topic_name("profiles"), topic_name("views")
    out_topic = topic_name("by-zip")
    create_topics(kafka_bootstrap, {profiles_topic: 4, views_topic: 4, out_topic: 4})
    config = example_config(
        "page-view-zip-enricher", tmp_path, kafka_bootstrap, topic_name,
        {"user-profiles": profiles_topic, "page-views": views_topic,
         "page-views-by-zip": out_topic},
        task__commit__ms=0)

    # Phase 1: one profile for 36 of 40 users, views of all 40; killed mid-stream.
    profiles1, views1 = zip_views(seed=13, users=40, views=6_000, without_profile=4)
    produce(kafka_bootstrap, profiles_topic, profiles1)
    produce(kafka_bootstrap, views_topic, views1)
    crash_mid_stream(config, "mid-batch:4", len(profiles1) + len(views1))
    finish(config)

    # Phase 2: users 0-9 move (new ZIP codes) and view nothing; two of the four users without a
    # profile get one, releasing their waiting views; everyone else keeps viewing.
    users = [f"user-{n:03d}" for n in range(40)]
    profiles2 = profile_updates(99, users[:10] + users[36:38])
    views2 = page_views(seed=14, events=2_000, partitions=4, first_view=len(views1),
                        late_fraction=0.0, user_ids=users[10:])
    produce(kafka_bootstrap, profiles_topic, profiles2)
    produce(kafka_bootstrap, views_topic, views2)
    finish(config)

    expected = zip_enrichment([(profiles1, views1), (profiles2, views2)])
    assert expected.pending, "two users never get a profile: their views keep waiting"
    assert merged(dump(config, "user-zips")) == expected.zips
    assert merged(dump(config, "pending-views")) == expected.pending

    records = outputs(kafka_bootstrap, out_topic, "read_committed")
    copies = Counter(view["view_id"] for _, view in records)
    assert max(copies.values()) == 1, "a view was enriched twice"
    assert {view["view_id"]: view for _, view in records} == expected.enriched
    assert all(key == view["zip"] for key, view in records)

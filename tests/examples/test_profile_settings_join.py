"""Example 2 end to end: the profile x settings table join under exactly-once, killed mid-commit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from examples.generate import create_topics, produce, user_tables
from examples.reference import table_join
from tests.examples.helpers import crash_mid_stream, dump, example_config, finish, merged, outputs

pytestmark = pytest.mark.kafka


def test_profile_settings_join_is_exactly_once_across_a_kill(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    profiles_topic, settings_topic = topic_name("profiles"), topic_name("settings")
    out_topic = topic_name("joined")
    create_topics(kafka_bootstrap, {profiles_topic: 4, settings_topic: 4, out_topic: 4})
    profiles, settings = user_tables(seed=12, users=60, changes=6_000, partitions=4)
    produce(kafka_bootstrap, profiles_topic, profiles)
    produce(kafka_bootstrap, settings_topic, settings)
    config = example_config(
        "profile-settings-join", tmp_path, kafka_bootstrap, topic_name,
        {"user-profiles": profiles_topic, "user-settings": settings_topic,
         "user-profile-settings": out_topic},
        task__commit__ms=0)

    # Killed inside a commit: after the checkpoint record, before the transaction commits.
    crash_mid_stream(config, "after-checkpoint-topic:6", len(profiles) + len(settings))
    finish(config)

    expected = table_join(profiles, settings)
    assert any(r.value is None for r in profiles + settings), "the data deletes some rows"
    assert merged(dump(config, "profiles")) == expected.profiles
    assert merged(dump(config, "settings")) == expected.settings

    records = outputs(kafka_bootstrap, out_topic, "read_committed")
    # Exactly once: one joined record per input change, none lost or repeated by the kill.
    assert Counter(key for key, _ in records) == expected.changes
    latest = {key: value for key, value in records}
    assert latest == expected.joined

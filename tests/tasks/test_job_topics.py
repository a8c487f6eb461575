"""A job's own topics against a real broker: a new job's changelogs, checkpoint, dead-letter
and internal topics are created in one request (not one round trip each), each as asked."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from millpond.kafka.admin import TopicAdmin, check_job_topics
from millpond.kafka.errors import TopicError
from tests.kafka_util import RecordingClient, create_topic, topic_layout

pytestmark = pytest.mark.kafka


def _requests(spy: RecordingClient) -> list[list[str]]:
    """Each create_topics request's topic names."""
    return [sorted(t.topic for t in topics) for _, topics in spy.calls]


def test_a_new_jobs_topics_are_created_in_one_request_each_as_asked(
    kafka_bootstrap: str, topic_name: Callable[[str], str],
) -> None:
    source = topic_name("in")
    create_topic(kafka_bootstrap, source, 3)
    counts, seen = topic_name("counts-changelog"), topic_name("seen-changelog")
    checkpoint, dlq, internal = topic_name("ckpt"), topic_name("dlq"), topic_name("rekey")
    changelogs = {
        counts: SimpleNamespace(changelog_topic_config={}, changelog_replication_factor=None),
        seen: SimpleNamespace(changelog_topic_config={"segment.ms": "600000"},
                              changelog_replication_factor=1)}
    admin = TopicAdmin({"bootstrap.servers": kafka_bootstrap})
    spy = RecordingClient(admin.admin, "create_topics")
    admin.admin = spy  # type: ignore[assignment]

    tasks = check_job_topics(admin, [source, internal], changelogs, checkpoint, dlq,
                             {internal: {"retention.ms": "-1"}})
    assert tasks == 3
    assert _requests(spy) == [sorted([counts, seen, checkpoint, dlq, internal])]
    for topic, policy in ((counts, "compact"), (seen, "compact"), (checkpoint, "compact"),
                          (dlq, "delete"), (internal, "delete")):
        parts, conf = topic_layout(kafka_bootstrap, topic)
        assert (parts, conf["cleanup.policy"]) == (3, policy), topic
    assert topic_layout(kafka_bootstrap, seen)[1]["segment.ms"] == "600000"
    assert topic_layout(kafka_bootstrap, internal)[1]["retention.ms"] == "-1"

    # Started again: every topic is there, nothing is created.
    assert check_job_topics(admin, [source, internal], changelogs, checkpoint, dlq,
                            {internal: {"retention.ms": "-1"}}) == 3
    assert len(_requests(spy)) == 1

    # A changelog that exists with the wrong partition count is refused, naming it; the
    # new topics beside it were still made in one request.
    wrong, fresh = topic_name("wrong-changelog"), topic_name("fresh-changelog")
    create_topic(kafka_bootstrap, wrong, 2)
    plain = SimpleNamespace(changelog_topic_config={}, changelog_replication_factor=None)
    with pytest.raises(TopicError, match=f"changelog topic {wrong} has 2 partitions but the "
                                         "job has 3 tasks"):
        check_job_topics(admin, [source], {wrong: plain, fresh: plain}, checkpoint)
    assert _requests(spy)[1:] == [[fresh]]

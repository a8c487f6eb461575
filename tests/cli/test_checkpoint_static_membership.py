"""``checkpoint set`` under static membership (docs/operations/status.md): it refuses while the
consumer group has members, and a job with ``group.instance.id`` stays a member until
``session.timeout.ms`` after it stopped (a static member sends no LeaveGroup), so ``set``
refuses right after such a job exits, naming the group, writes nothing, and succeeds once the
broker expired the member. Against the real broker, with the installed console script."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from millpond.changelog.checkpoint import checkpoint_topic
from tests.kafka_util import (
    counting_job,
    create_topic,
    millpond,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)

# ~30 s: it waits out a session timeout (make test-slow runs it)
pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# long enough for one `checkpoint set` (a new process) to run before the member expires on a
# loaded machine
SESSION_MS = 10_000


def _members(bootstrap: str, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [desc] = admin.describe_consumer_groups([group])[group].result(timeout=30),
    return len(desc.members)


def _set(config: Path, source: str, offset: int) -> tuple[int, str, str]:
    out = millpond("checkpoint", "set", "--config", str(config), "--partition", "0",
                   "--offset", f"{source}={offset}")
    return out.returncode, out.stdout, out.stderr


def test_checkpoint_set_refuses_until_a_static_member_expires(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    produce_users(kafka_bootstrap, source, 20, 4, 1)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state", **{
        "systems.kafka.consumer.session.timeout.ms": SESSION_MS})
    assert props["systems.kafka.consumer.group.instance.id"]  # static membership
    config = write_properties(tmp_path / "job.properties", props)
    out = run_job(config, "--bounded", timeout=90)
    stopped = time.monotonic()
    assert out.returncode == 0, out.stdout + out.stderr
    group = f"{name}-1"
    records = [(m.offset(), m.value()) for m in read_topic(kafka_bootstrap,
                                                           checkpoint_topic(name, "1"))]

    # the stopped job is still a member: set refuses in one line, the topic unchanged
    code, _, err = _set(config, source, 3)
    assert time.monotonic() - stopped < SESSION_MS / 1000, "too slow to see the member"
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"Error: job {name} has live members in consumer group {group}; stop every process "
        "before setting checkpoints"], err
    assert [(m.offset(), m.value()) for m in read_topic(
        kafka_bootstrap, checkpoint_topic(name, "1"))] == records

    # the broker expires the member after session.timeout.ms, not before; set then writes
    deadline = stopped + SESSION_MS / 1000 + 30
    while _members(kafka_bootstrap, group):
        assert time.monotonic() < deadline, "the static member never expired"
        time.sleep(0.2)
    assert time.monotonic() - stopped >= SESSION_MS / 1000 * 0.8
    code, stdout, err = _set(config, source, 3)
    assert code == 0, err
    assert json.loads(stdout)["inputs"] == {source: 3}

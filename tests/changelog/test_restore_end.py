"""Where each guarantee restores to (the README's guarantees table, restore column), told
apart against the real broker by a changelog record written outside any transaction after
the job's last commit (as an older millpond could have written one):

- ``at-least-once`` and ``exactly-once`` restore to the changelog's committed end: the
  wiped store comes back with that record's value;
- ``effectively-once`` restores to the checkpointed changelog offsets, then re-writes the
  current value of each key written after them and commits at once: the store comes back
  with the checkpointed value, and the changelog's newest record of the key says it again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    latest_by_key,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 2
OUTSIDE = 12_345  # the count the record written outside a transaction says


@pytest.mark.parametrize("guarantee", ["at-least-once", "effectively-once", "exactly-once"])
def test_each_guarantee_restores_to_where_the_readme_says(
    guarantee: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, PARTITIONS)
    expected = produce_users(kafka_bootstrap, source, 200, 10, PARTITIONS)
    config = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state",
        **{"task.processing.guarantee": guarantee}))
    first = run_job(config, "--bounded", timeout=90)
    assert first.returncode == 0, first.stdout + first.stderr

    changelog = f"{name}-counts-changelog"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})  # no transaction
    producer.produce(changelog, key=b"user-0", value=json.dumps(OUTSIDE).encode(), partition=0)
    assert producer.flush(30) == 0

    shutil.rmtree(tmp_path / "state")
    again = run_job(config, "--bounded", timeout=90)
    assert again.returncode == 0, again.stdout + again.stderr
    restored = dump_store(config, "counts")
    newest = latest_by_key(read_topic(kafka_bootstrap, changelog))[b"user-0"]
    if guarantee == "effectively-once":
        assert restored == dict(expected)
        assert newest == json.dumps(expected["user-0"]).encode()  # re-written, committed
    else:
        assert restored == {**expected, "user-0": OUTSIDE}
        assert newest == json.dumps(OUTSIDE).encode()

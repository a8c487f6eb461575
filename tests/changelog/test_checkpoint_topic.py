"""A dead task's open transaction must not hide other tasks' committed checkpoints."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from millpond.changelog.checkpoint import Checkpoint, read_checkpoints, task_name
from millpond.kafka.reading import restore_consumer
from tests.kafka_util import create_topic

pytestmark = pytest.mark.kafka


def test_open_transaction_of_one_task_does_not_hide_another_tasks_checkpoint(
    kafka_bootstrap: str, topic_name: Callable[[str], str]
) -> None:
    topic = topic_name("ckpt")
    create_topic(kafka_bootstrap, topic, 2, **{"cleanup.policy": "compact"})

    def txn_producer(partition: int) -> Producer:
        p = Producer({"bootstrap.servers": kafka_bootstrap,
                      "transactional.id": f"{topic}-{task_name(partition)}"})
        p.init_transactions(30)
        p.begin_transaction()
        return p

    # Task 1 dies after writing its checkpoint record, before committing.
    dead = txn_producer(1)
    dead.produce(topic, key=task_name(1).encode(), partition=1,
                 value=Checkpoint(task_name(1), 1, {"in": 9}, {}).to_bytes())
    dead.flush(30)
    # Task 0 commits a newer checkpoint afterwards, in its own partition.
    live = txn_producer(0)
    newest = Checkpoint(task_name(0), 0, {"in": 42}, {"counts": 7})
    live.produce(topic, key=task_name(0).encode(), partition=0, value=newest.to_bytes())
    live.commit_transaction(30)

    consumer = restore_consumer({"bootstrap.servers": kafka_bootstrap}, "read_committed")
    try:
        assert read_checkpoints(consumer, topic, [0]) == {task_name(0): newest}
        assert read_checkpoints(consumer, topic) == {task_name(0): newest}
    finally:
        consumer.close()
        dead.abort_transaction(30)

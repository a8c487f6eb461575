"""A task closed without a commit aborts its transaction only while Kafka answers.

An abort while Kafka is away waits out its 5 s timeout; closing lost tasks happens inside a
rebalance callback, so two lost tasks held the group's rebalance up to 10 s after the broker
came back (the broker-outage fault test resumed 13 s after a 60 s SIGSTOP, 2026-12-07).
The next owner's ``init_transactions`` aborts the transaction in any case. Unit test of the
manager alone: the consumer, opener, committer and tasks are stand-ins.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

from millpond.kafka.errors import TransactionAbortedError
from millpond.kafka.outage import OutageClock
from millpond.tasks.commit import CommitFailure
from millpond.tasks.manager import TaskManager


def manager(partitions: list[int]) -> tuple[TaskManager, dict[int, Any]]:
    outage = OutageClock(300.0, "127.0.0.1:9092")
    opener = mock.Mock(outage=outage, pending=False)
    instances = {p: SimpleNamespace(partition=p, name=f"partition-{p}", task=mock.Mock(),
                                    close_storage=mock.Mock(), producer=mock.Mock())
                 for p in partitions}
    tasks: dict[int, Any] = dict(instances)
    return TaskManager(tasks, mock.Mock(), opener, mock.Mock(), ["in"]), instances


def test_lost_tasks_abort_their_transactions_while_kafka_answers() -> None:
    m, instances = manager([0, 1])
    m.lost([0, 1])
    for t in instances.values():
        t.producer.abort_transaction.assert_called_once_with(5)
        t.producer.discard.assert_called_once_with()
        t.close_storage.assert_called_once_with()
    assert m.tasks == {}


def test_lost_tasks_do_not_abort_while_kafka_is_away() -> None:
    m, instances = manager([0, 1])
    m.opener.outage.unavailable("task partition-2 aborted: Kafka did not acknowledge")
    m.lost([0, 1])
    for t in instances.values():
        t.producer.abort_transaction.assert_not_called()
        t.producer.discard.assert_called_once_with()
        t.close_storage.assert_called_once_with()
    assert m.tasks == {}


def test_a_commit_that_failed_for_want_of_kafka_skips_the_abort() -> None:
    m, instances = manager([0, 1])
    errors = {0: TransactionAbortedError("Kafka did not acknowledge its records",
                                         unavailable=True),
              1: TransactionAbortedError("the transaction must be aborted")}
    failures = {}
    for p, error in errors.items():
        m._pending[p] = pending = mock.Mock()
        failures[id(pending)] = CommitFailure(instances[p], error)
    m.committer.finish.side_effect = lambda pending: failures[id(pending)]
    m.lost([0, 1])
    instances[0].producer.abort_transaction.assert_not_called()  # Kafka was away
    instances[1].producer.abort_transaction.assert_called_once_with(5)  # Kafka answered

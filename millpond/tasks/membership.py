"""Group membership: the consumer group's rebalance callbacks, and the errors they keep.

The callbacks run inside ``consume()``; they must be quick and must never let an exception
escape into librdkafka (it would resurface later as an unrelated error), so each one is
guarded and its exception kept in the job's :class:`~millpond.kafka.faults.ClientFaults`
for the run loop to raise.
What a rebalance means for the tasks is the task manager's business: assigned partitions
are only recorded and paused (their tasks open in the run loop); revoked partitions are
unassigned at once and their tasks commit right after the poll returns (a callback that
took more than ~1 ms stalled the partitions that stay, see TaskManager.revoked); lost
tasks close without committing; either way an opening still under way is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from millpond.kafka.faults import ClientFaults
from millpond.tasks.manager import TaskManager

log = logging.getLogger("millpond.container")

Callback = Callable[[Consumer, list[TopicPartition]], None]


def subscribe(consumer: Consumer, topic: str, manager: TaskManager, faults: ClientFaults) -> None:
    """Join the group on ``topic`` (the first input) with guarded callbacks that hand each
    rebalance to ``manager``."""

    def guarded(callback: Callable[[list[int]], None]) -> Callback:
        def run(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if manager.consumer is not consumer:  # a replaced consumer still closing
                log.debug("a replaced consumer's rebalance callback: ignored")
                return
            try:
                callback(sorted(p.partition for p in partitions))
            except BaseException as exc:  # noqa: BLE001 - raised by the run loop
                if faults.callback_error is None:
                    faults.callback_error = exc
        return run

    consumer.subscribe([topic], on_assign=guarded(manager.assigned),
                       on_revoke=guarded(manager.revoked), on_lost=guarded(manager.lost))

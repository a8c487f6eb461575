"""Group membership: the consumer group's rebalance callbacks, and the errors they keep.

The callbacks run inside ``consume()``; they must be quick and must never let an exception
escape into librdkafka (it would resurface later as an unrelated error), so each one is
guarded and its exception kept for the run loop to raise (:meth:`ClientFaults.check`).
What a rebalance means for the tasks is the task manager's business: assigned partitions
are only recorded and paused (their tasks open in the run loop); revoked tasks commit
first, lost tasks close without committing; either way an opening still under way is
dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, TopicPartition

from millpond.kafka.producer import log_client_error
from millpond.tasks.errors import TaskError
from millpond.tasks.manager import TaskManager

log = logging.getLogger("millpond.container")

Callback = Callable[[Consumer, list[TopicPartition]], None]


class ClientFaults:
    """What went wrong where it could not be raised: librdkafka's error callback and the
    rebalance callbacks run inside the client, so they keep their error here and the run
    loop raises it (:meth:`check`) between polls."""

    def __init__(self) -> None:
        self.fatal: KafkaError | None = None
        self.callback_error: BaseException | None = None

    def on_client_error(self, err: KafkaError) -> None:
        """librdkafka's ``error_cb``: log it; keep the first fatal one."""
        log_client_error(err)
        if err.fatal() and self.fatal is None:
            self.fatal = err

    def check(self) -> None:
        """Raise a rebalance callback's error, or a fatal client error."""
        if self.callback_error is not None:
            error, self.callback_error = self.callback_error, None
            raise error
        if self.fatal is not None:
            raise TaskError(f"fatal Kafka client error, stopping: {self.fatal.str()} "
                            "(state is safe: the next start restores from the checkpoint)")


def subscribe(consumer: Consumer, topic: str, manager: TaskManager, faults: ClientFaults) -> None:
    """Join the group on ``topic`` (the first input) with guarded callbacks that hand each
    rebalance to ``manager``."""

    def guarded(callback: Callable[[list[int]], None]) -> Callback:
        def run(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            try:
                callback(sorted(p.partition for p in partitions))
            except BaseException as exc:  # noqa: BLE001 - raised by the run loop
                if faults.callback_error is None:
                    faults.callback_error = exc
        return run

    consumer.subscribe([topic], on_assign=guarded(manager.assigned),
                       on_revoke=guarded(manager.revoked), on_lost=guarded(manager.lost))

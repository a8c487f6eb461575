"""Group membership: what the rebalance callbacks do.

The callbacks run inside ``consume()``; they must be quick and must never let an exception
escape into librdkafka (it would resurface later as an unrelated error), so each one is
guarded and its exception kept for the run loop to raise. Assigned partitions are only
recorded and paused (their tasks open in the run loop); revoked tasks commit first, lost
tasks close without committing; either way an opening still under way is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from millpond.tasks.instance import TaskInstance
from millpond.tasks.opening import TaskOpener

log = logging.getLogger("millpond.container")

Callback = Callable[[Consumer, list[TopicPartition]], None]


class Membership:
    """The consumer group's rebalance callbacks for one container."""

    def __init__(
        self, inputs: list[str], tasks: dict[int, TaskInstance], opener: TaskOpener,
        commit: Callable[[list[TaskInstance]], None], close_task: Callable[[int], None],
    ) -> None:
        self.inputs = inputs
        self.tasks = tasks
        self.opener = opener
        self._commit = commit
        self._close_task = close_task
        self.error: BaseException | None = None

    def inputs_of(self, partitions: list[int]) -> list[TopicPartition]:
        """Every input partition of the given tasks. The offset is explicit: a task seeks to
        its checkpoint when it opens, so the group's committed (transactional, possibly
        pending) offsets are never looked up."""
        return [TopicPartition(t, p, OFFSET_BEGINNING) for p in partitions for t in self.inputs]

    def subscribe(self, consumer: Consumer) -> None:
        """Join the group on the first input with the guarded callbacks."""
        consumer.subscribe([self.inputs[0]], on_assign=self._guarded(self.on_assign),
                           on_revoke=self._guarded(self.on_revoke),
                           on_lost=self._guarded(self.on_lost))

    def _guarded(self, callback: Callable[[Consumer, list[int]], None]) -> Callback:
        def run(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            try:
                callback(consumer, sorted(p.partition for p in partitions))
            except BaseException as exc:  # noqa: BLE001 - raised by the run loop
                if self.error is None:
                    self.error = exc
        return run

    def on_assign(self, consumer: Consumer, partitions: list[int]) -> None:
        tps = self.inputs_of(partitions)
        consumer.incremental_assign(tps)
        consumer.pause(tps)
        for p in partitions:
            self.opener.add(p)
        self.opener.release_holds()
        log.info("assigned partitions %s", partitions)

    def on_revoke(self, consumer: Consumer, partitions: list[int]) -> None:
        log.info("revoking partitions %s", partitions)
        ready = [self.tasks[p] for p in partitions if p in self.tasks]
        if ready:
            self._commit(ready)
        self._forget(consumer, partitions)

    def on_lost(self, consumer: Consumer, partitions: list[int]) -> None:
        log.warning("partitions %s were lost to another member; closing without commit",
                    partitions)
        self._forget(consumer, partitions)

    def _forget(self, consumer: Consumer, partitions: list[int]) -> None:
        for p in partitions:
            self.opener.drop(p)
            self._close_task(p)
        self.opener.release_holds()
        consumer.incremental_unassign(self.inputs_of(partitions))

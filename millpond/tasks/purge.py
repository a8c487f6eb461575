"""Deleting what a dataflow's internal topics no longer need.

A key_by's topic keeps its records by no age (``retention.ms=-1``: a job that is down for a
week must not lose them). Once the task that reads a partition has committed past a record,
nobody needs it: every ``every_s`` seconds after a commit, each task's committed position in
each internal topic is handed to the broker's DeleteRecords (Kafka Streams purges its
repartition topics the same way). A failure (a missing Delete ACL, Kafka away) is logged and
retried later; it only costs disk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from millpond.kafka.outage import LIMITER, suffix
from millpond.tasks.instance import TaskInstance

log = logging.getLogger("millpond.container")


class InternalTopicPurger:
    """Deletes the records of internal topics below the tasks' committed positions."""

    def __init__(self, admin: AdminClient, topics: Iterable[str], every_s: float = 30.0) -> None:
        self.admin = admin
        self.topics = tuple(topics)
        self.every_s = every_s
        self._last = time.monotonic()
        self._done: dict[tuple[str, int], int] = {}  # what was deleted up to, per partition

    def after_commit(self, tasks: Iterable[TaskInstance], now: float | None = None) -> None:
        """Called after a commit (of some of ``tasks``: they commit in turns): purge below
        each task's committed positions if ``every_s`` has passed."""
        now = time.monotonic() if now is None else now
        if not self.topics or now - self._last < self.every_s:
            return
        self._last = now
        offsets = [TopicPartition(topic, t.partition, t.committed_offsets[topic])
                   for t in tasks for topic in self.topics
                   if t.committed_offsets.get(topic, 0)
                   > self._done.get((topic, t.partition), 0)]
        if not offsets:
            return
        try:
            futures = self.admin.delete_records(offsets, request_timeout=10)
        except (KafkaException, ValueError) as exc:
            self._failed(str(exc))
            return
        for tp, future in futures.items():
            try:
                future.result(timeout=15)
                self._done[(tp.topic, tp.partition)] = tp.offset
            except Exception as exc:  # noqa: BLE001 - any failure: try again next time
                self._failed(f"{tp.topic}[{tp.partition}]: {exc}")

    @staticmethod
    def _failed(what: str) -> None:
        dropped = LIMITER.admit("purge internal topic")
        if dropped is not None:
            log.warning("could not delete consumed records of an internal topic (%s); retrying "
                        "later (the job needs Delete on its internal topics)%s", what,
                        suffix(dropped))

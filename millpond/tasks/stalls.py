"""Input partitions whose fetching stopped while records wait for them: found, assigned again.

An open task gets its input from the group consumer's fetches. If those stop for one
partition while the others go on (once, after a broker outage, a task's partition was not
fetched again for minutes with thousands of records waiting; its cause not found), the task
falls behind without an error anywhere. The run loop notes when each task last got records;
a task without any for ``stall_s`` is a suspect, and one suspect per ``every_s`` is checked
against Kafka: if its partition's end (the last stable offset under ``read_committed``) is
past the consumer's position, the fetch had stopped, and the partition is assigned again at
the task's position (as a task's start does), with a warning. An idle input (its end at the
position) is left alone. No check while Kafka is unreachable: every partition waits then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from millpond.tasks.instance import TaskInstance
from millpond.tasks.manager import fetch_from

log = logging.getLogger("millpond.container")

STALL_S = 30.0  # no records for this long: a suspect
CHECK_EVERY_S = 10.0  # one suspect's watermarks read at most this often (a blocking read)
CHECK_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Stall:
    """A task's input partition not fetched while records wait."""

    topic: str
    partition: int
    position: int  # where the task resumes
    end: int  # the partition's end as read now


class StallWatch:
    """When each task last got records, and which one is checked next."""

    def __init__(self, stall_s: float = STALL_S, every_s: float = CHECK_EVERY_S) -> None:
        self.stall_s = stall_s
        self.every_s = every_s
        self._fed: dict[int, float] = {}  # partition -> monotonic time it last got records
        self._next_check = 0.0
        self._turn = 0  # round robin over the suspects

    def fed(self, partition: int, now: float) -> None:
        """The task of ``partition`` got records at ``now``."""
        self._fed[partition] = now

    def suspects(self, partitions: list[int], now: float) -> list[int]:
        """The open tasks without records for ``stall_s`` (a new one counts from now)."""
        for p in [p for p in self._fed if p not in partitions]:
            del self._fed[p]
        for p in partitions:
            self._fed.setdefault(p, now)
        return sorted(p for p in partitions if now - self._fed[p] >= self.stall_s)

    def check(self, tasks: Mapping[int, TaskInstance], inputs: list[str], consumer: Consumer,
              now: float, kafka_up: bool,
              ends: Callable[[Consumer, str, int], int] | None = None) -> list[Stall]:
        """Every ``every_s``: read one suspect's input ends; its stalled partitions, which
        are assigned again at the task's position (and the task counts as fed)."""
        if now < self._next_check:
            return []
        self._next_check = now + self.every_s
        suspects = self.suspects(list(tasks), now)
        if not suspects or not kafka_up:
            return []
        self._turn += 1
        p = suspects[self._turn % len(suspects)]
        task = tasks[p]
        read = ends or _end
        stalls = []
        for topic in inputs:
            tp = TopicPartition(topic, p)
            try:
                end = read(consumer, topic, p)
                fetched = consumer.position([tp])[0].offset
            except KafkaException as exc:
                log.debug("stall check of %s[%d]: %s", topic, p, exc)
                return []
            position = task.next_offsets.get(topic, 0)
            if max(position, fetched) < end:
                stalls.append(Stall(topic, p, position, end))
        self._fed[p] = now
        for s in stalls:
            log.warning("task %s: no records for %.0fs while %s[%d] has %d past its position "
                        "%d: its fetch had stopped; assigned again at %d", task.name,
                        self.stall_s, s.topic, s.partition, s.end - s.position, s.position,
                        s.position)
        if stalls:
            fetch_from(consumer, [TopicPartition(s.topic, s.partition, s.position)
                                  for s in stalls])
        return stalls


def _end(consumer: Consumer, topic: str, partition: int) -> int:
    """The partition's end for this consumer (the LSO under read_committed), from Kafka."""
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                             timeout=CHECK_TIMEOUT_S, cached=False)
    return int(high)

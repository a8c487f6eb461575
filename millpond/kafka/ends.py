"""The end offsets of partitions a transactional producer wrote: where its last record is.

A task's checkpoint records, per changelog partition, the offset of the last record its
transaction wrote (recovery replays up to it and trims what lies beyond). Those offsets used
to come from a delivery report per produced record, ~0.8 CPU µs each in Python, paid for
every output and internal-topic record too. A task's producer is the only writer of its
changelog partitions (its ``transactional.id`` fences every older owner), so once its records
are acknowledged (``acks=all``: the high watermark has passed them) the partition's high
watermark minus one is its last record: :class:`LogEnds` asks for the high watermarks of
every partition one commit wrote, one ListOffsets request per leader (Samza reads its
changelogs' newest offsets at each commit the same way). A new leader whose high watermark
is behind answers OFFSET_NOT_AVAILABLE, so a stale (lower) end is retried, not returned; the
producer also checks each end against the records it sent (see
:meth:`millpond.kafka.producer.TrackedProducer.resolve_ends`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from millpond.kafka.denials import denied, is_denied
from millpond.kafka.errors import TransactionAbortedError

log = logging.getLogger(__name__)
TopicPart = tuple[str, int]
EndsLookup = Callable[[Sequence[TopicPart]], dict[TopicPart, int]]  # what LogEnds is
RETRY_S = 0.05  # between two asks for the partitions a leader could not answer yet
# Answers that say the client's idea of a partition's leader is out of date: after its broker
# was paused and fenced librdkafka's admin client kept sending the old leader epoch (FENCED_LEADER_EPOCH on
# every ask until its metadata was refreshed), so the first refreshes its metadata and the
# next makes a new client.
_STALE_LEADER = frozenset({KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
                           KafkaError.NOT_LEADER_FOR_PARTITION,
                           KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE})


class LogEnds:
    """High watermarks (read_uncommitted ends) of partitions, asked of their leaders."""

    def __init__(self, admin: AdminClient, timeout_s: float = 15.0,
                 remake: Callable[[], AdminClient] | None = None) -> None:
        self.admin = admin
        self.timeout_s = timeout_s
        self.remake = remake  # a new client, for when the old one's metadata stays stale
        self.requests = 0  # ListOffsets calls made (each: one request per leader)
        self.refreshes = 0  # metadata refreshes and new clients after a stale leader

    def __call__(self, parts: Sequence[TopicPart]) -> dict[TopicPart, int]:
        """Each partition's end offset. Retries what a leader cannot answer yet within
        ``timeout_s``; then raises TransactionAbortedError (unavailable: the transaction is
        aborted and replayed); an authorization error is fatal and names the topic."""
        deadline = time.monotonic() + self.timeout_s
        ends: dict[TopicPart, int] = {}
        left = list(dict.fromkeys(parts))
        stale = 0  # asks that found a stale leader, this call
        while True:
            failed: list[tuple[TopicPart, KafkaError]] = []
            self.requests += 1
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): OffsetSpec.latest() for t, p in left},
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=max(1.0, deadline - time.monotonic()))
            for tp, future in futures.items():
                part = (tp.topic, tp.partition)
                try:
                    ends[part] = future.result().offset
                except KafkaException as exc:
                    err: KafkaError = exc.args[0]
                    if is_denied(err):
                        raise denied(err, tp.topic, "Describe") from exc
                    failed.append((part, err))
            if not failed:
                return ends
            if any(err.code() in _STALE_LEADER for _, err in failed):
                self._refresh({topic for (topic, _), _ in failed}, deadline, new=stale == 1)
                stale += 1
            if time.monotonic() + RETRY_S >= deadline:
                (topic, partition), err = failed[0]
                raise TransactionAbortedError(
                    f"the end offset of {topic}[{partition}] could not be read within "
                    f"{self.timeout_s:.0f}s ({err.str()}); the transaction is replayed",
                    unavailable=True)
            time.sleep(RETRY_S)
            left = [part for part, _ in failed]

    def _refresh(self, topics: set[str], deadline: float, new: bool) -> None:
        """Renew what the client knows of ``topics``' leaders: its metadata, and with ``new``
        (the refresh did not help) a new client first, when it can make one."""
        self.refreshes += 1
        log.info("reading the ends of %s: a stale leader; %s", ", ".join(sorted(topics)),
                 "a new admin client" if new and self.remake is not None
                 else "refreshing its metadata")
        if new and self.remake is not None:
            self.admin = self.remake()
        timeout = max(0.5, min(5.0, deadline - time.monotonic()))
        for topic in topics:
            try:
                self.admin.list_topics(topic=topic, timeout=timeout)
            except KafkaException:
                pass  # the next ask says what is wrong

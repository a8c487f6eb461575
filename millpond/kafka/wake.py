"""Waking a group consumer's fetchers after a cooperative rebalance.

librdkafka (2.16) pauses every assigned partition while a cooperative rebalance's callbacks
run and resumes them when the application calls ``incremental_assign``/``unassign``. The
resume is an op its broker threads look at only when they next wake up: a broker thread
that had nothing to fetch while the partitions were paused waits for its next request or
its idle timeout first. The partitions that stayed with this process were not fetched for
100-150 ms after about half of the scale-outs measured (lab notes 2026-12-06; the same
delay is in confluent-kafka-go issue #630's logs). Any request to a leader wakes its broker
thread: :class:`FetcherWake` sends one ListOffsets per leader of the given partitions (twice,
see :data:`WAKE_AFTER_S`), from its own thread, so the rebalance callback that asks for it
does not wait.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

from confluent_kafka import Consumer, TopicPartition

log = logging.getLogger(__name__)

WAKE_TIMEOUT_S = 2.0  # each request's bound: a wake-up is a hint, never worth waiting on
# When the requests go, after the callback asked: librdkafka's main thread applies the resume
# to each partition a little after incremental_assign returns, and a broker thread woken
# before that sleeps again (one of six scale-outs still stalled 139 ms with a single
# immediate wake-up); the second covers a main thread slowed by a loaded machine.
WAKE_AFTER_S = (0.005, 0.05)


def one_per_leader(consumer: Consumer, tps: list[TopicPartition]) -> list[TopicPartition]:
    """One of ``tps`` per leader broker (metadata from the consumer: one request per topic);
    a partition whose leader is unknown is kept (its request finds the leader)."""
    chosen: dict[tuple[object, ...], TopicPartition] = {}
    for topic in sorted({tp.topic for tp in tps}):
        md = consumer.list_topics(topic, timeout=WAKE_TIMEOUT_S).topics.get(topic)
        parts = md.partitions if md is not None and md.error is None else {}
        for tp in tps:
            if tp.topic == topic:
                meta = parts.get(tp.partition)
                leader = meta.leader if meta is not None else -1
                chosen.setdefault(("leader", leader) if leader >= 0 else (topic, tp.partition),
                                  tp)
    return list(chosen.values())


class FetcherWake:
    """Wakes the broker threads that fetch the given partitions, in the background."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="millpond-wake")
        self._pending: Future[None] | None = None

    def wake(self, consumer: Consumer, tps: list[TopicPartition]) -> None:
        """Send a request to the leader of each of ``tps`` (one wake-up at a time: one
        under way when a second rebalance ends wakes the same threads)."""
        if not tps or (self._pending is not None and not self._pending.done()):
            return
        self._pending = self._pool.submit(self._wake, consumer, list(tps))

    @staticmethod
    def _wake(consumer: Consumer, tps: list[TopicPartition]) -> None:
        began = time.monotonic()
        try:
            leaders = one_per_leader(consumer, tps)
            for at in WAKE_AFTER_S:
                time.sleep(max(0.0, began + at - time.monotonic()))
                for tp in leaders:
                    consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                   timeout=WAKE_TIMEOUT_S)
        except Exception as exc:  # a hint: the fetcher wakes by itself a little later
            log.debug("waking the fetchers of %s: %s", tps, exc)

    def settle(self) -> None:
        """Wait for a wake-up under way (bounded by its requests' timeouts): before the
        consumer it uses is closed."""
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def close(self) -> None:
        """Wait for a wake-up under way, then stop the thread."""
        self.settle()
        self._pool.shutdown(wait=True)

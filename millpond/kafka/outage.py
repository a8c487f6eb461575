"""Kafka going away and coming back: which errors mean "unreachable", quiet logging while it
is, and how long a running job waits for it.

A broker restart, an outage or a stalled broker shows up as timeouts and transport errors on
every client at once. None of them is a reason to stop: librdkafka reconnects by itself, and a
task whose transaction could not be saved is aborted and replayed from its last commit. What
must not happen is a job that exits on the first timeout, or one that never stops (past
``task.timeout.ms`` it does, with one line), or a log that grows by dozens of lines a second
(:class:`LogLimiter`: one line per cause per 30 s, with a count).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError

from millpond.kafka.errors import BrokerUnreachableError

log = logging.getLogger("millpond.kafka")

LOG_EVERY_S = 30.0

# What a client reports while the brokers cannot be reached or cannot answer in time: not a
# property of the data, so the work is retried (replayed from the last commit) once they do.
UNAVAILABLE = frozenset({
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._WAIT_COORD,
    KafkaError._TIMED_OUT_QUEUE, KafkaError.BROKER_NOT_AVAILABLE,
})


def is_unavailable(err: KafkaError) -> bool:
    """True if ``err`` says Kafka could not be reached or did not answer in time."""
    return err.code() in UNAVAILABLE


_NUMBERS = re.compile(r"\d+")


class LogLimiter:
    """Lets one log line per cause through every ``every_s`` seconds and counts the rest.

    The cause is a key the caller chooses (librdkafka lines: facility and text with numbers
    blanked, so every client's "Connection refused" is one cause)."""

    def __init__(self, every_s: float = LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()  # librdkafka logs from its own threads too
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __getstate__(self) -> dict[str, object]:
        """Picklable (Spark ships client settings, their logger included, to executors): the
        copy starts with no history and a lock of its own."""
        return {"every_s": self.every_s, "_clock": self._clock}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["every_s"], state["_clock"])  # type: ignore[misc]

    def admit(self, cause: str) -> int | None:
        """None to drop this line; else the number of lines of the same cause dropped since
        the last one let through (say it in the line)."""
        now = self._clock()
        with self._lock:
            last = self._last.get(cause)
            if last is not None and now - last < self.every_s:
                self._held[cause] = self._held.get(cause, 0) + 1
                return None
            self._last[cause] = now
            if len(self._last) > 1000:  # many distinct causes: forget the old ones
                self._last = {k: v for k, v in self._last.items() if now - v < self.every_s}
            return self._held.pop(cause, 0)

    @staticmethod
    def cause_of(*parts: str) -> str:
        """A cause key: the parts with their numbers blanked (ports, counts, ids)."""
        return _NUMBERS.sub("#", " ".join(parts))


def suffix(dropped: int | None) -> str:
    """`` (+N similar in the last 30s)`` for a line that stands for dropped ones."""
    return f" (+{dropped} similar in the last {LOG_EVERY_S:.0f}s)" if dropped else ""


LIMITER = LogLimiter()


class OutageClock:
    """How long this process has been unable to reach Kafka, against ``task.timeout.ms``.

    The run loop reports each commit or task opening that failed because Kafka was
    unreachable (:meth:`unavailable`) and each one that succeeded (:meth:`available`);
    :meth:`check` raises once the outage has lasted longer than the timeout."""

    def __init__(self, timeout_s: float, bootstrap: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self.bootstrap = bootstrap
        self._clock = clock
        self.since: float | None = None
        self.cause = ""
        self.outages = 0
        self._limiter = LogLimiter(clock=clock)

    @property
    def down_s(self) -> float:
        """Seconds since the outage began (0 when Kafka answers)."""
        return 0.0 if self.since is None else self._clock() - self.since

    def unavailable(self, cause: str, ago_s: float = 0.0) -> None:
        """Something could not be done because Kafka did not answer; it will be retried.
        ``ago_s``: how long ago the failed work began (a commit's records waited in the
        producer until they timed out), when this starts an outage."""
        now = self._clock()
        if self.since is None:
            self.since = now - max(0.0, ago_s)
            self.outages += 1
        self.cause = cause
        dropped = self._limiter.admit("outage")
        if dropped is not None:
            log.warning("Kafka at %s unreachable for %.0fs (%s); retrying, replaying from the "
                        "last commit, for up to task.timeout.ms=%d%s", self.bootstrap,
                        now - self.since, cause, int(self.timeout_s * 1000), suffix(dropped))

    def available(self) -> None:
        """Kafka answered (a commit or an opening succeeded): the outage, if any, is over."""
        if self.since is not None:
            log.warning("Kafka at %s answers again after %.1fs; resuming", self.bootstrap,
                        self._clock() - self.since)
            self.since = None
            self._limiter = LogLimiter(clock=self._clock)

    def check(self) -> None:
        """Raise :class:`BrokerUnreachableError` once the outage is longer than the timeout."""
        if self.since is not None and self.down_s >= self.timeout_s:
            raise BrokerUnreachableError(
                f"Kafka at {self.bootstrap} unreachable for {self.down_s:.0f}s, longer than "
                f"task.timeout.ms={int(self.timeout_s * 1000)} ({self.cause}); stopping. State "
                "is safe: the next start restores every task from its last commit")

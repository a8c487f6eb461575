"""The one place Kafka clients are made, so librdkafka logs through Python logging.

librdkafka writes its log lines (``%3|1700000000.123|FAIL|rdkafka#consumer-1| ...``) straight
to stderr unless the client is given a ``logger``. Every millpond client gets the
``millpond.kafka`` logger instead: its lines then carry the process's logging format and
level, and a caller can silence or redirect them like any other Python log. Each line names
the client it comes from (``rdkafka#producer-3 GETPID: ...``; the client's ``client.id``
replaces ``rdkafka`` when set), and librdkafka's warnings about a coordinator that is still
loading (a fresh broker's first seconds; librdkafka retries by itself) are INFO, not WARNING.

confluent-kafka serves these log lines from the client's ``poll()`` (``consume()``,
``flush()``), which every millpond client calls.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from millpond.kafka.outage import LIMITER, LogLimiter, suffix

KAFKA_LOG = logging.getLogger("millpond.kafka")

# librdkafka's thread tag at the start of a line (``[thrd:main]: ``): which of its internal
# threads wrote it, of no use to a reader.
_THREAD_TAG = re.compile(r"^\[thrd:[^\]]*\]: ")
# Warnings that are a broker's normal start-up, which librdkafka rides out by retrying.
_TRANSIENT = ("Coordinator load in progress", "Coordinator not available")

# Sees each librdkafka line (facility, text); True: the line is explained (see LibrdkafkaLog).
Listener = Callable[[str, str], "bool | None"]

# auto.offset.reset: every spelling accepted, Kafka's (and librdkafka's) and Samza's, to the
# policy it means (librdkafka's names).
OFFSET_RESET_SPELLINGS = {"earliest": "earliest", "smallest": "earliest", "latest": "latest",
                          "largest": "latest", "error": "error", "none": "error"}


class LibrdkafkaLog:
    """The ``logger`` given to librdkafka: each line becomes a ``millpond.kafka`` record
    ``<client name> <FACILITY>: <text>``.

    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client_name, text)``.
    ``listener(facility, text)``, if given, sees every line first (a client that must act
    on what librdkafka only logs); when it returns True the line is explained by an error
    the caller raises (a wrong password, say), and is logged at DEBUG only. Lines of one
    cause (facility and text, numbers blanked) are let through once per 30 s, with a count
    of the ones dropped: during an outage every client repeats the same failure every
    second."""

    def __init__(self, logger: logging.Logger = KAFKA_LOG,
                 listener: Listener | None = None, limiter: LogLimiter = LIMITER) -> None:
        self.logger = logger
        self.listener = listener
        self.limiter = limiter

    def log(self, level: int, msg: str, *args: Any) -> None:
        if len(args) != 3:
            self.logger.log(level, msg, *args)
            return
        facility, name, text = args
        text = _THREAD_TAG.sub("", str(text))
        if self.listener is not None and self.listener(str(facility), text) is True:
            level = logging.DEBUG
        if level == logging.WARNING and "retrying" in text and any(
                t in text for t in _TRANSIENT):
            level = logging.INFO
        more = ""
        if level >= logging.INFO:  # debug lines (the `debug` setting) are never dropped
            dropped = self.limiter.admit(LogLimiter.cause_of(str(facility), text))
            if dropped is None:
                return
            more = suffix(dropped)
        self.logger.log(level, "%s %s: %s%s", name, facility, text, more)

    def also(self, listener: Listener) -> LibrdkafkaLog:
        """This log with one more listener, called after this one's (a line is explained
        if either says so)."""
        first = self.listener

        def both(facility: str, text: str) -> bool | None:
            explained = first(facility, text) if first is not None else None
            return listener(facility, text) is True or explained is True

        return LibrdkafkaLog(self.logger, both, self.limiter)


LIBRDKAFKA_LOG = LibrdkafkaLog()


# Kafka brokers create a topic that a client's metadata request names, unless told not to
# (``auto.create.topics.enable``, true by default on the broker; ``allow.auto.create.topics``,
# true by default in librdkafka's producers and admin clients). Every topic millpond needs it
# creates itself with its own settings (compacted changelogs with one partition per task): a
# lookup of a missing changelog must not make it a 1-partition, delete-policy topic, and a
# check of a missing input must not create an empty input.
NO_AUTO_CREATE = {"allow.auto.create.topics": False}


def with_logger(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` plus ``logger``: librdkafka's lines go to ``millpond.kafka``, unless the
    caller passed a logger of its own; and no topic created by a lookup, unless the caller
    asked for that."""
    out = {**NO_AUTO_CREATE, **conf}
    out.setdefault("logger", LIBRDKAFKA_LOG)
    return out


def consumer(conf: Mapping[str, Any]) -> Consumer:
    """A ``Consumer`` logging through Python logging."""
    return Consumer(with_logger(conf))


def producer(conf: Mapping[str, Any]) -> Producer:
    """A ``Producer`` logging through Python logging."""
    return Producer(with_logger(conf))


def admin(conf: Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` logging through Python logging, whose lookups never create a topic
    (whatever ``conf`` says: its callers decide what a missing topic means)."""
    return AdminClient({**with_logger(conf), **NO_AUTO_CREATE})


# How long a group consumer's close may take before the process goes on without it.
CLOSE_TIMEOUT_S = 10.0


def close_within(client: Consumer, what: str, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
    """Close ``client`` (a group consumer), waiting at most ``timeout_s`` seconds; True if it
    closed.

    librdkafka's close waits for the group coordinator: for the requests in flight (up to
    ``socket.timeout.ms``), and after a broker outage it was seen waiting for ever on a
    coordinator connection that never came back (its request never sent). Call it only
    after the tasks' final commit: a consumer left closing then holds nothing uncommitted,
    and the group hands its partitions on when the member's session expires. The close goes
    on in a daemon thread, which does not hold up the process's exit."""
    errors: list[BaseException] = []

    def close() -> None:
        try:
            client.close()
        except (KafkaException, RuntimeError) as exc:  # already closed, or failed for good
            errors.append(exc)

    closing = threading.Thread(target=close, name=f"millpond-close-{what}", daemon=True)
    closing.start()
    closing.join(timeout_s)
    if closing.is_alive():
        KAFKA_LOG.warning("the %s did not close within %gs (its group coordinator does not "
                          "answer); going on without it: everything was committed before",
                          what, timeout_s)
        return False
    if errors:
        KAFKA_LOG.debug("closing the %s: %s", what, errors[0])
    return True

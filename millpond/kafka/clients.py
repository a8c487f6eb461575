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
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from millpond.kafka.errors import ClientSettingsError
from millpond.kafka.outage import LIMITER, LogLimiter, suffix

T = TypeVar("T")

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


# A conf entry that is no librdkafka setting: a :class:`SettingSources`, where the job's
# config set each setting. A client whose settings librdkafka refuses names them in its
# error (millpond.job.Job sets it).
SETTINGS_SOURCE = "millpond.settings.source"


@dataclass(frozen=True)
class SettingSources:
    """Where a job's config set its librdkafka settings: ``locations`` maps each
    ``systems.kafka.*`` key to its ``file:line``. Plain data: a conf that carries it is
    pickled to Spark's executors."""

    locations: Mapping[str, str]
    prefix: str = "systems.kafka."

    def __call__(self, client: str, prop: str) -> str | None:
        """``file:line: key`` of the key that set ``prop`` for a ``client`` ("consumer",
        "producer", "admin"): its own key first, then the shared one; None if neither."""
        own = {"consumer": "consumer.", "producer": "producer."}.get(client)
        for part in ((own, "") if own else ("",)):
            key = f"{self.prefix}{part}{prop}"
            if key in self.locations:
                return f"{self.locations[key]}: {key}"
        return None


# How librdkafka quotes a property in its errors: `fetch.max.bytes`, "session.timeout.ms"
_QUOTED = re.compile(r"[`\"]([a-z][a-z0-9_.]*\.[a-z0-9_.]*[a-z0-9])[`\"]")


def _make(kind: str, make: Callable[[dict[str, Any]], T], conf: Mapping[str, Any]) -> T:
    """``make`` a client of ``conf``; librdkafka's refusal of its settings as a
    :class:`ClientSettingsError` naming where each cited setting was set."""
    source: SettingSources | None = conf.get(SETTINGS_SOURCE)
    settings = {k: v for k, v in conf.items() if k != SETTINGS_SOURCE}
    try:
        return make(settings)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError) or error.code() != KafkaError._INVALID_ARG:
            raise
        raise settings_error(kind, error.str(), source) from None


# librdkafka's aliases (CONFIGURATION.md): its errors cite the right-hand name.
ALIASES = {"linger.ms": "queue.buffering.max.ms", "retries": "message.send.max.retries",
           "acks": "request.required.acks", "compression.type": "compression.codec",
           "max.in.flight": "max.in.flight.requests.per.connection",
           "delivery.timeout.ms": "message.timeout.ms", "sasl.mechanism": "sasl.mechanisms",
           "bootstrap.servers": "metadata.broker.list"}


def settings_error(kind: str, text: str, source: SettingSources | None,
                   ) -> ClientSettingsError:
    """The error for librdkafka's ``text`` refusing a ``kind`` client's settings."""
    places = []
    for name in dict.fromkeys(_QUOTED.findall(text)):
        names = [name, *(alias for alias, real in ALIASES.items() if real == name)]
        found = [w for n in names if source and (w := source(kind, n))]
        places.append(f"{name}: {found[0] if found else 'not set in the config'}")
    return ClientSettingsError(
        f"librdkafka refused the Kafka {kind} settings: {text}"
        + (f" ({'; '.join(places)})" if places else ""))


def consumer(conf: Mapping[str, Any]) -> Consumer:
    """A ``Consumer`` logging through Python logging."""
    return _make("consumer", Consumer, with_logger(conf))


def producer(conf: Mapping[str, Any]) -> Producer:
    """A ``Producer`` logging through Python logging."""
    return _make("producer", Producer, with_logger(conf))


def admin(conf: Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` logging through Python logging, whose lookups never create a topic
    (whatever ``conf`` says: its callers decide what a missing topic means)."""
    return _make("admin", AdminClient, {**with_logger(conf), **NO_AUTO_CREATE})


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

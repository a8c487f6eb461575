"""The one place Kafka clients are made, so librdkafka logs through Python logging.

librdkafka writes its log lines (``%3|1700000000.123|FAIL|rdkafka#consumer-1| ...``) straight
to stderr unless the client is given a ``logger``. Every millpond client gets the
``millpond.kafka`` logger instead: its lines then carry the process's logging format and
level, and a caller can silence or redirect them like any other Python log.

confluent-kafka serves these log lines from the client's ``poll()`` (``consume()``,
``flush()``), which every millpond client calls.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

KAFKA_LOG = logging.getLogger("millpond.kafka")


def with_logger(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` plus ``logger``: librdkafka's lines go to ``millpond.kafka``, unless the
    caller passed a logger of its own."""
    out = dict(conf)
    out.setdefault("logger", KAFKA_LOG)
    return out


def consumer(conf: Mapping[str, Any]) -> Consumer:
    """A ``Consumer`` logging through Python logging."""
    return Consumer(with_logger(conf))


def producer(conf: Mapping[str, Any]) -> Producer:
    """A ``Producer`` logging through Python logging."""
    return Producer(with_logger(conf))


def admin(conf: Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` logging through Python logging."""
    return AdminClient(with_logger(conf))

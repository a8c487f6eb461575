"""Which ``systems.<s>.consumer.*`` / ``producer.*`` keys librdkafka knows.

Samza configs carry Java Kafka client settings (``zookeeper.connect``, ``key.serializer``,
``auto.commit.enable``, ...) that librdkafka either refuses (``No such configuration
property``) or knows only as a legacy property with another meaning. Those are left out of
the client configuration (the caller logs one INFO line per key); every other key passes
through to librdkafka unchanged.

How a key is judged: ``JAVA_ONLY`` names the Java client's keys outright (with the reason).
Any other key is asked of the installed librdkafka itself, once per key and process: a
client config is built with the key followed by a deliberately invalid value for a known
property. librdkafka applies properties in order, so an unknown key fails first with
"No such configuration property"; a known key (whatever its value) fails on the second
property instead. No client is ever created, so the probe costs microseconds and logs
nothing, and it follows whatever librdkafka version is installed (no copied key list to go
stale).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from confluent_kafka import Consumer, KafkaException, Producer

Client = Literal["consumer", "producer"]

# Keys of the Java clients (and the old Scala consumer Samza's docs use) that librdkafka must
# not receive: the ones it does not know at all are found by the probe too, but naming them
# gives a better reason; auto.commit.enable is a legacy librdkafka property with another
# meaning (millpond commits offsets itself).
JAVA_ONLY: dict[str, str] = {
    "zookeeper.connect": "ZooKeeper (old Scala consumer); librdkafka uses bootstrap.servers",
    "zookeeper.session.timeout.ms": "ZooKeeper (old Scala consumer)",
    "zookeeper.connection.timeout.ms": "ZooKeeper (old Scala consumer)",
    "zookeeper.sync.time.ms": "ZooKeeper (old Scala consumer)",
    "auto.commit.enable": "old Scala consumer setting; millpond commits offsets itself",
    "key.serializer": "Java serializer class; millpond serializes with the stream's serdes",
    "value.serializer": "Java serializer class; millpond serializes with the stream's serdes",
    "key.deserializer": "Java deserializer class; millpond uses the stream's serdes",
    "value.deserializer": "Java deserializer class; millpond uses the stream's serdes",
    "serializer.class": "old Scala producer serializer class",
    "key.serializer.class": "old Scala producer serializer class",
    "partitioner.class": "Java partitioner class; task N writes to partition N",
}

_PROBE_TARGET = "session.timeout.ms"  # known to both clients; "x" is never a valid value
_PROBE_SPARE = "heartbeat.interval.ms"
_UNKNOWN = "No such configuration property"


def java_only_reason(key: str, client: Client) -> str | None:
    """Why ``key`` is not passed to librdkafka, or None if librdkafka knows it."""
    reason = JAVA_ONLY.get(key)
    if reason is not None:
        return reason
    if not known_to_librdkafka(key, client):
        return "a Java Kafka client setting librdkafka does not know"
    return None


@lru_cache(maxsize=1024)
def known_to_librdkafka(key: str, client: Client) -> bool:
    """True if the installed librdkafka accepts ``key`` as a property name (see module doc)."""
    invalid = _PROBE_SPARE if key == _PROBE_TARGET else _PROBE_TARGET
    conf = {key: "0", invalid: "x"}
    if client == "consumer" and key != "group.id":
        conf = {"group.id": "probe", **conf}  # checked before the other properties
    make = Consumer if client == "consumer" else Producer
    try:
        made = make(conf)
    except KafkaException as exc:
        return _UNKNOWN not in str(exc.args[0].str() if exc.args else exc)
    except (TypeError, ValueError):  # a Python-client property (e.g. error_cb): known
        return True
    # Not expected (the invalid property always fails), but never leak a client.
    close = getattr(made, "close", None)
    if close is not None:
        close()
    return True

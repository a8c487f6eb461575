"""Kafka's authorization and authentication failures become one named, fatal error (the
broker-side proof is tests/kafka/test_secure_denials.py; these pin the mapping)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from millpond.errors import MillpondError
from millpond.kafka.denials import denied
from millpond.kafka.errors import AuthenticationError, AuthorizationError, KafkaClientError
from millpond.kafka.faults import ClientFaults
from millpond.kafka.producer import TrackedProducer


def test_a_denial_names_resource_operation_and_where_to_look() -> None:
    error = denied(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed"),
                   "page-views", "Read")
    assert isinstance(error, MillpondError)
    assert (error.resource, error.name, error.operation) == ("topic", "page-views", "Read")
    assert "denied Read on topic page-views" in str(error)
    assert "millpond acls" in str(error)
    cluster = denied(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED), "x", "Create")
    assert cluster.resource == "cluster" and cluster.name == "kafka-cluster"


def test_the_consumer_group_is_named_for_a_group_denial() -> None:
    faults = ClientFaults("counts-1", "127.0.0.1:9094")
    group = faults.consumer_error(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), "in")
    assert group is not None and (group.resource, group.name) == ("group", "counts-1")
    topic = faults.consumer_error(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), "in")
    assert topic is not None and (topic.resource, topic.name) == ("topic", "in")
    assert faults.consumer_error(KafkaError(KafkaError._TRANSPORT), "in") is None


@pytest.mark.parametrize("code, words", [
    (KafkaError._AUTHENTICATION, "authentication failed"),
    (KafkaError._SSL, "TLS handshake failed"),
])
def test_authentication_and_tls_failures_are_fatal(code: int, words: str) -> None:
    faults = ClientFaults("counts-1", "127.0.0.1:9094")
    faults.check()  # nothing yet
    faults.on_client_error(KafkaError(code, "SASL authentication error: bad password"))
    with pytest.raises(AuthenticationError, match=words) as raised:
        faults.check()
    assert "127.0.0.1:9094" in str(raised.value)


def test_a_fatal_client_error_is_raised_as_a_millpond_error() -> None:
    faults = ClientFaults()
    faults.on_client_error(KafkaError(KafkaError._FATAL, "boom", fatal=True))
    with pytest.raises(KafkaClientError, match="fatal Kafka client error"):
        faults.check()


def test_a_denied_delivery_raises_the_denial_before_any_commit() -> None:
    producer = TrackedProducer({"bootstrap.servers": "127.0.0.1:1"})
    msg = SimpleNamespace(topic=lambda: "counts-changelog", partition=lambda: 0,
                          key=lambda: b"k")
    producer._on_delivery(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), msg)  # type: ignore[arg-type]
    with pytest.raises(AuthorizationError, match="denied Write on topic counts-changelog"):
        producer.raise_errors()
    producer.raise_errors()  # reported once
    producer.discard()

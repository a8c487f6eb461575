"""Kafka's authorization failures as :class:`AuthorizationError`, naming what was denied."""

from __future__ import annotations

from confluent_kafka import KafkaError

from millpond.kafka.errors import AuthorizationError

# Kafka's authorization error codes, and the kind of resource each is about.
DENIALS = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional-id",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}


def is_denied(err: KafkaError | None) -> bool:
    """``err`` is an authorization failure."""
    return err is not None and err.code() in DENIALS


def denied(err: KafkaError, name: str, operation: str) -> AuthorizationError:
    """The error to raise for authorization failure ``err`` on ``name``."""
    resource = DENIALS.get(err.code(), "resource")
    return AuthorizationError(resource, "kafka-cluster" if resource == "cluster" else name,
                              operation, err.str())

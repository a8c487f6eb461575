"""The secured dev broker is real and enforces what it says: SASL over TLS, SCRAM users,
ACLs with nothing allowed by default.

Each test proves its condition happened by the error code librdkafka or the broker gave,
not by a timeout: TOPIC_AUTHORIZATION_FAILED, _AUTHENTICATION (the broker's
SASL_AUTHENTICATION_FAILED), _SSL (certificate verify failed), _TRANSPORT.
"""

from __future__ import annotations

import logging
import socket
import ssl
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import SecureKafka

pytestmark = [pytest.mark.kafka, pytest.mark.secure]


class _Records(logging.Handler):
    """Keeps librdkafka's log lines of one client (its ``logger``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _client_logger() -> tuple[logging.Logger, _Records]:
    logger = logging.getLogger(f"tests.secure.{uuid.uuid4().hex[:8]}")
    logger.propagate = False
    records = _Records()
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    return logger, records


def _errors_until(conf: dict[str, Any], wanted: int, timeout: float = 15.0,
                  ) -> tuple[list[KafkaError], list[str]]:
    """Poll a client made from ``conf`` until its error callback reports ``wanted`` (or
    ``timeout`` passes); the errors it reported and its log lines."""
    errors: list[KafkaError] = []
    logger, records = _client_logger()
    admin = AdminClient({**conf, "error_cb": errors.append, "logger": logger,
                         "reconnect.backoff.ms": 200})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(e.code() == wanted for e in errors):
        admin.poll(0.2)
    return errors, records.lines


def _user(secure_kafka: SecureKafka, prefix: str = "user") -> tuple[str, dict[str, Any]]:
    """A new SCRAM user with no ACLs, and its client settings."""
    name, password = f"{prefix}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    secure_kafka.add_user(name, password)
    logger, _ = _client_logger()
    return name, {**secure_kafka.user_config(name, password), "logger": logger}


def test_admin_lists_topics(secure_kafka: SecureKafka,
                            topic_name: Callable[[str], str]) -> None:
    admin = AdminClient(secure_kafka.admin_config)
    topic = topic_name("admin")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    metadata = admin.list_topics(timeout=30)
    assert len(metadata.topics[topic].partitions) == 2
    assert [b.port for b in metadata.brokers.values()] == [int(secure_kafka.bootstrap.split(":")[1])]
    # The other mechanisms log the admin in too.
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        conf = secure_kafka.local.user_config("admin", secure_kafka.local.admin_password,
                                              mechanism)
        assert topic in AdminClient(conf).list_topics(timeout=30).topics


def test_user_without_acls_is_denied(secure_kafka: SecureKafka,
                                     topic_name: Callable[[str], str]) -> None:
    _, conf = _user(secure_kafka, "nobody")
    existing = topic_name("exists")
    super_admin = AdminClient(secure_kafka.admin_config)  # kept: a dropped client's futures fail
    super_admin.create_topics([NewTopic(existing, 1, 1)])[existing].result(30)
    admin = AdminClient(conf)

    new = topic_name("new")
    with pytest.raises(KafkaException) as created:
        admin.create_topics([NewTopic(new, 1, 1)])[new].result(30)
    assert created.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    described = admin.list_topics(existing, timeout=30).topics[existing]
    assert described.error is not None
    assert described.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert described.partitions == {}

    reports: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 10000})
    producer.produce(existing, b"denied", on_delivery=lambda err, _msg: reports.append(err))
    assert producer.flush(30) == 0
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_granted_user_creates_produces_transactionally_and_consumes(
        secure_kafka: SecureKafka) -> None:
    name, conf = _user(secure_kafka, "app")
    prefix = f"{name}."
    for resource, operation in [("TOPIC", "CREATE"), ("TOPIC", "DESCRIBE"), ("TOPIC", "WRITE"),
                                ("TOPIC", "READ"), ("TRANSACTIONAL_ID", "WRITE"),
                                ("TRANSACTIONAL_ID", "DESCRIBE"), ("GROUP", "READ")]:
        secure_kafka.grant(name, resource, prefix, "PREFIXED", operation)

    topic, group = f"{prefix}orders", f"{prefix}group"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    producer = Producer({**conf, "transactional.id": f"{prefix}txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=str(i), value=f"v{i}")
    producer.commit_transaction(30)

    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        consumer.subscribe([topic])
        seen: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.append((msg.key(), msg.value()))
        assert seen == [(b"0", b"v0"), (b"1", b"v1"), (b"2", b"v2")]
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed[0].error is None and committed[0].offset == 3
    finally:
        consumer.close()

    # Revoked, writing is denied again (reading still works: only WRITE went).
    secure_kafka.revoke(name, "TOPIC", prefix, "PREFIXED", "WRITE")
    reports: list[KafkaError | None] = []
    plain = Producer({**conf, "message.timeout.ms": 10000})
    plain.produce(topic, b"after-revoke", on_delivery=lambda err, _msg: reports.append(err))
    assert plain.flush(30) == 0
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == 1


def test_wrong_password_fails_authentication(secure_kafka: SecureKafka) -> None:
    _, conf = _user(secure_kafka, "pw")
    errors, _ = _errors_until({**conf, "sasl.password": "not-the-password"},
                              KafkaError._AUTHENTICATION)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"no authentication error, only {errors}"
    assert "invalid credentials" in auth[0].str() and "SCRAM-SHA-512" in auth[0].str()
    # The right password, same user: it was the password.
    assert AdminClient(conf).list_topics(timeout=30).brokers


def test_client_without_the_ca_fails_tls_verification(secure_kafka: SecureKafka) -> None:
    conf = dict(secure_kafka.admin_config)
    del conf["ssl.ca.location"]
    errors, _ = _errors_until(conf, KafkaError._SSL)
    tls = [e for e in errors if e.code() == KafkaError._SSL]
    assert tls, f"no TLS error, only {errors}"
    assert "certificate verify failed" in tls[0].str()


def test_plaintext_client_on_the_tls_port_fails(secure_kafka: SecureKafka) -> None:
    errors, lines = _errors_until({"bootstrap.servers": secure_kafka.bootstrap},
                                  KafkaError._ALL_BROKERS_DOWN)
    assert any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors), errors
    # The broker hung up on the plaintext ApiVersions request: nothing was ever answered.
    assert any("connection closed by peer" in line and "APIVERSION_QUERY" in line
               for line in lines), lines
    logger, _ = _client_logger()
    with pytest.raises(KafkaException) as raised:
        AdminClient({"bootstrap.servers": secure_kafka.bootstrap, "logger": logger}
                    ).list_topics(timeout=1.5)
    assert raised.value.args[0].code() == KafkaError._TRANSPORT

    # The port speaks TLS with a certificate for 127.0.0.1 that the dev CA signed.
    context = ssl.create_default_context(cafile=str(secure_kafka.ca))
    host, port = secure_kafka.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        assert set(tls.getpeercert()["subjectAltName"]) == {("DNS", "localhost"),
                                                            ("IP Address", "127.0.0.1")}

"""Whatever the librdkafka client raises comes out of TrackedProducer as a millpond error or a
KafkaException, never as the bare ``KafkaError`` object confluent-kafka 2.16 raised from a
fenced producer's ``flush()`` (no ``except`` clause but a bare one catches that object: on a
commit thread it killed the thread and hung the run loop, fault tests 2026-12-06).

The fake client raises the object the way the C extension did (the error indicator set to a
non-exception), through ``ctypes``; everything else is the real TrackedProducer."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from millpond.kafka.errors import DeliveryError, ProducerFencedError
from millpond.kafka.producer import TrackedProducer, as_exception


def raise_bare(err: KafkaError) -> None:
    """Raise ``err`` itself (not an exception), as a C extension can."""
    ctypes.pythonapi.PyErr_SetObject(ctypes.py_object(KafkaError), ctypes.py_object(err))


class BareClient:
    """A client whose every call raises ``err`` itself."""

    def __init__(self, err: KafkaError) -> None:
        self.err = err
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: object, **kwargs: object) -> None:
            self.calls.append(name)
            raise_bare(self.err)
        return call


def test_the_fake_raises_what_no_except_clause_catches() -> None:
    caught = "nothing"
    try:
        try:
            raise_bare(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
        except BaseException:  # noqa: BLE001 - the point: this does not catch it
            caught = "BaseException"
    except:  # noqa: E722
        caught = "bare"
    assert caught == "bare"


def producer_over(err: KafkaError, transactional: bool = True) -> tuple[TrackedProducer, BareClient]:
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    if transactional:
        conf.update({"transactional.id": "counts-0", "transaction.timeout.ms": "120000"})
    producer = TrackedProducer(conf)
    producer._producer.purge()
    client = BareClient(err)
    producer._producer = client  # type: ignore[assignment]
    return producer, client


FENCED = KafkaError(KafkaError._FENCED, "Producer fenced by newer instance", fatal=True)


@pytest.mark.parametrize("call", [
    lambda p: p.poll(),
    lambda p: p.flush_and_check(1.0),
    lambda p: p.init_transactions(1.0),
    lambda p: p.begin_transaction(),
    lambda p: p.commit_transaction(1.0),
    lambda p: p.send("out", 0, b"k", b"v"),
], ids=["poll", "flush", "init", "begin", "commit", "send"])
def test_a_fenced_client_that_raises_its_error_object_is_fenced(call: Any) -> None:
    producer, client = producer_over(FENCED)
    with pytest.raises(ProducerFencedError, match="fenced or failed fatally.*Producer fenced"):
        call(producer)
    assert client.calls  # the client was called, and raised


@pytest.mark.parametrize("call", [
    lambda p: p.abort_transaction(1.0),
    lambda p: p.close(1.0),
    lambda p: p.discard(),
], ids=["abort", "close", "discard"])
def test_best_effort_calls_survive_the_error_object(call: Any) -> None:
    producer, client = producer_over(KafkaError(KafkaError._TRANSPORT, "broker down"))
    call(producer)  # logged, not raised
    assert client.calls


def test_a_record_refused_with_the_error_object_names_topic_partition_and_key() -> None:
    producer, _ = producer_over(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"),
                                transactional=False)
    with pytest.raises(DeliveryError, match=r"out\[3\] key=b'user-7' \(1 bytes\): too large"):
        producer.send("out", 3, b"user-7", b"v")


def test_a_non_fatal_error_object_from_flush_is_a_kafka_exception() -> None:
    producer, _ = producer_over(KafkaError(KafkaError._TRANSPORT, "broker down"))
    with pytest.raises(KafkaException) as raised:
        producer.flush_and_check(1.0)
    assert raised.value.args[0].code() == KafkaError._TRANSPORT


def test_as_exception_wraps_errors_and_anything_else() -> None:
    err = KafkaError(KafkaError._FENCED, "fenced", fatal=True)
    assert as_exception(err).args[0] is err
    other = as_exception(SimpleNamespace(x=1)).args[0]
    assert other.code() == KafkaError._FAIL and "namespace" in other.str()

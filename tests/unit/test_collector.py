"""KafkaCollector's two record paths: send_record and a stream's record_sender."""

from __future__ import annotations

from typing import Any

from millpond.api import MessageCollector, OutgoingMessageEnvelope
from millpond.serdes.builtins import JsonSerde, StringSerde
from millpond.tasks.collector import KafkaCollector


class _Producer:
    """Records what the collector hands the producer (the producer is not under test)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def send(self, *args: Any) -> None:
        self.calls.append(args)


def test_record_sender_sends_what_send_record_sends() -> None:
    producer = _Producer()
    looked_up: list[str] = []

    def serdes(ref: Any) -> tuple[Any, Any]:
        looked_up.append(ref.topic)
        return StringSerde(), JsonSerde()

    collector = KafkaCollector(producer, serdes)  # type: ignore[arg-type]
    collector.send_record("kafka.out", "k1", {"n": 1}, 5)
    sender = collector.record_sender("kafka.out")
    sender("k1", {"n": 1}, 5)
    sender(None, None, None)
    assert producer.calls == [("out", None, b"k1", b'{"n":1}', None, 5)] * 2 + [
        ("out", None, None, None, None, None)]
    assert collector.sent == 3
    assert looked_up == ["out"]  # resolved once for both paths


def test_a_collector_without_its_own_record_sender_gets_send_records() -> None:
    sent: list[OutgoingMessageEnvelope] = []

    class Listing(MessageCollector):
        def send(self, envelope: OutgoingMessageEnvelope) -> None:
            sent.append(envelope)

    Listing().record_sender("kafka.out")("k", "v", 7)
    assert [(e.stream, e.key, e.message, e.timestamp) for e in sent] == [
        ("kafka.out", "k", "v", 7)]

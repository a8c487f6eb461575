"""The collector: serializes output messages and hands them to a tracked producer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from millpond.api import MessageCollector, OutgoingMessageEnvelope, SerdePair
from millpond.config import StreamRef
from millpond.kafka.admin import OutputTopics
from millpond.kafka.producer import TrackedProducer

SerdeLookup = Callable[[StreamRef], SerdePair]


class KafkaCollector(MessageCollector):
    """Sends outputs through the task's producer (inside its transaction under exactly-once)."""

    def __init__(self, producer: TrackedProducer, serdes: SerdeLookup,
                 default_system: str = "kafka", outputs: OutputTopics | None = None):
        self.producer = producer
        self._serdes = serdes
        self._outputs = outputs
        self._default_system = default_system
        self._cache: dict[str, tuple[str, Any, Any]] = {}
        self.sent = 0

    def _resolve(self, stream: str) -> tuple[str, Any, Any]:
        hit = self._cache.get(stream)
        if hit is None:
            ref = StreamRef.parse(stream, self._default_system)
            key_serde, msg_serde = self._serdes(ref)
            if self._outputs is not None:
                self._outputs.ensure(ref.topic)  # created on first send, or a clear error
            hit = self._cache[stream] = (ref.topic, key_serde, msg_serde)
        return hit

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        """Serialize ``envelope`` with its stream's serdes and queue it."""
        self._send(envelope.stream, envelope.partition, envelope.key, envelope.message,
                   envelope.headers or None, envelope.timestamp)

    def send_record(self, stream: str, key: Any, message: Any, timestamp: int | None) -> None:
        """:meth:`send` of a record with no partition or headers, with no envelope made."""
        self._send(stream, None, key, message, None, timestamp)

    def record_sender(self, stream: str) -> Callable[[Any, Any, int | None], None]:
        """:meth:`send_record` bound to ``stream``, its topic and serdes resolved now (the
        topic made or checked as at a first send): a dataflow's output, per record, with two
        calls fewer than send_record."""
        topic, key_serde, msg_serde = self._resolve(stream)
        key_to = key_serde.to_bytes if key_serde is not None else None
        msg_to = msg_serde.to_bytes if msg_serde is not None else None
        send = self.producer.send

        def sender(key: Any, message: Any, timestamp: int | None) -> None:
            if key is not None and key_to is not None:
                key = key_to(key)
            if message is not None and msg_to is not None:
                message = msg_to(message)
            send(topic, None, key, message, None, timestamp)
            self.sent += 1
        return sender

    def _send(self, stream: str, partition: int | None, key: Any, message: Any,
              headers: Any, timestamp: int | None) -> None:
        topic, key_serde, msg_serde = self._resolve(stream)
        if key is not None and key_serde is not None:
            key = key_serde.to_bytes(key)
        if message is not None and msg_serde is not None:
            message = msg_serde.to_bytes(message)
        self.producer.send(topic, partition, key, message, headers, timestamp)
        self.sent += 1

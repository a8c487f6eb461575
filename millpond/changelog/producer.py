"""A Kafka producer that never loses a delivery error.

Every record produced through :class:`TrackedProducer` is acknowledged or its error is
kept; :meth:`TrackedProducer.flush_and_check` raises the first error before a commit
can complete. It also remembers the last acknowledged offset per partition, which is
what checkpoints record for changelogs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from millpond.changelog.errors import DeliveryError

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]


def log_client_error(err: KafkaError) -> None:
    """Say plainly when Kafka is unreachable; librdkafka keeps retrying by itself."""
    if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        log.warning("Kafka broker unreachable (%s); waiting and retrying", err.str())
    elif err.fatal():
        log.error("fatal Kafka client error: %s", err.str())
    else:
        log.warning("Kafka client: %s", err.str())


class TrackedProducer:
    """A confluent-kafka Producer with delivery bookkeeping (one per process or per task)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        conf: dict[str, Any] = {
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "enable.idempotence": True,
            "message.timeout.ms": 120_000,
            "queue.buffering.max.messages": 500_000,
        }
        conf.update(config)
        conf["on_delivery"] = self._on_delivery
        conf.setdefault("error_cb", log_client_error)
        self.transactional = "transactional.id" in conf
        self._producer = Producer(conf)
        self._errors: list[str] = []
        self._last: dict[tuple[str, int], int] = {}
        self.sent = 0
        self.acked = 0

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            where = f"{msg.topic()}[{msg.partition()}]"
            self._errors.append(f"{where} key={msg.key()!r}: {err.str()}")
            return
        self.acked += 1
        tp = (msg.topic(), msg.partition())
        offset = msg.offset()
        if offset is not None and offset > self._last.get(tp, -1):  # type: ignore[arg-type]
            self._last[tp] = offset  # type: ignore[index]

    def send(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
        headers: Headers | None = None,
    ) -> None:
        """Queue one record; waits for queue space rather than dropping it."""
        produce = self._producer.produce
        part = -1 if partition is None else partition
        while True:
            try:
                if headers:
                    produce(topic, value, key, part, headers=list(headers))
                else:
                    produce(topic, value, key, part)
                break
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:
                size = len(value) if value is not None else 0
                raise DeliveryError(
                    f"Kafka rejected a record for {topic}[{part}] key={(key or b'')[:60]!r} "
                    f"({size} bytes): {exc.args[0].str()}") from exc
        self.sent += 1
        if self.sent & 0x3FF == 0:
            self._producer.poll(0)

    def poll(self) -> None:
        """Serve delivery callbacks without blocking."""
        self._producer.poll(0)

    def flush_and_check(self, timeout: float = 120.0) -> None:
        """Wait until every queued record is acknowledged; raise the first delivery error."""
        deadline = time.monotonic() + timeout
        remaining = self._producer.flush(timeout)
        while remaining and time.monotonic() < deadline:
            remaining = self._producer.flush(max(0.1, deadline - time.monotonic()))
        self.raise_errors()
        if remaining:
            raise DeliveryError(
                f"{remaining} produced record(s) were not acknowledged within {timeout:.0f}s; "
                "the commit is abandoned so nothing unacknowledged is checkpointed"
            )

    def raise_errors(self) -> None:
        """Raise :class:`DeliveryError` if any delivery failed since the last call."""
        if self._errors:
            errors, self._errors = self._errors, []
            more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
            raise DeliveryError(f"Kafka did not accept a record: {errors[0]}{more}")

    def last_offset(self, topic: str, partition: int) -> int | None:
        """The highest acknowledged offset produced to ``topic[partition]``, if any."""
        return self._last.get((topic, partition))

    # Transactions (exactly-once): thin pass-throughs with errors made precise.
    def init_transactions(self, timeout: float = 60.0) -> None:
        self._producer.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._producer.begin_transaction()

    def send_offsets(self, offsets: list[Any], group_metadata: Any, timeout: float = 60.0) -> None:
        self._producer.send_offsets_to_transaction(offsets, group_metadata, timeout)

    def commit_transaction(self, timeout: float = 60.0) -> None:
        """Commit the open transaction; delivery errors inside it raise first."""
        self._producer.flush(timeout)
        self.raise_errors()
        self._producer.commit_transaction(timeout)

    def abort_transaction(self, timeout: float = 60.0) -> None:
        self._errors.clear()
        try:
            self._producer.abort_transaction(timeout)
        except KafkaException as exc:
            log.warning("abort_transaction failed: %s", exc)

    def close(self, timeout: float = 30.0) -> None:
        """Flush what is queued (best effort) and release the client."""
        self._producer.flush(timeout)

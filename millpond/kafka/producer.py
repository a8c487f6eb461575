"""A Kafka producer that never loses a delivery error.

Every record produced through :class:`TrackedProducer` is acknowledged or its error is
kept; :meth:`TrackedProducer.flush_and_check` raises the first error before a commit
can complete. It also knows the last offset it wrote per partition, which is what
checkpoints record for changelogs: from each record's delivery report, or (a task's
transactional producer given ``ends``) reporting errors only, from the high watermarks of
the partitions of the topics it was told to watch, read after the records were acknowledged
(:mod:`millpond.kafka.ends`): a delivery report per record costs ~0.8 CPU µs in Python.

Transactional producers (one per task) translate librdkafka's errors into two ordinary
events: :class:`ProducerFencedError` (another process owns the task now, or the producer
hit a fatal error) and :class:`TransactionAbortedError` (the transaction was aborted).
No exception raised inside a librdkafka callback is left to surface as ``SystemError``.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message

from millpond.kafka import clients
from millpond.kafka.denials import denied, is_denied
from millpond.kafka.ends import EndsLookup, TopicPart
from millpond.kafka.errors import (
    DeliveryError,
    KafkaClientError,
    ProducerFencedError,
    TransactionAbortedError,
)
from millpond.kafka.outage import LIMITER, is_unavailable, suffix

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]

# What librdkafka logs when a transaction is denied a topic (it reports it nowhere else).
_ADDPARTS_TOPIC = re.compile(r'partition "([^"]+)"')
_ERROR_NAME = re.compile(r"\((\w+_AUTHORIZATION_FAILED)\)")
# Records a transactional producer purged because its transaction failed for another reason.
_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
ENDS_WAIT_S = 15.0  # how long a partition's end may stay behind the records sent to it



def log_client_error(err: KafkaError) -> None:
    """Say plainly when Kafka is unreachable; librdkafka keeps retrying by itself. One line
    per kind of error per 30 s: every client reports the same outage, every second."""
    if err.fatal():
        log.error("fatal Kafka client error: %s", err.str())
        return
    dropped = LIMITER.admit(f"client error {err.code()}")
    if dropped is None:
        return
    if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
        log.warning("Kafka broker unreachable (%s); waiting and retrying%s", err.str(),
                    suffix(dropped))
    else:
        log.warning("Kafka client: %s%s", err.str(), suffix(dropped))


T = TypeVar("T")


def as_exception(raised: object) -> KafkaException:
    """What a librdkafka call raised that is not an exception at all, as the
    ``KafkaException`` it should have been. confluent-kafka 2.16's ``flush()`` on a fenced
    producer raised the ``KafkaError`` object itself, which no ``except`` clause but a bare
    one catches (not even ``BaseException``): on a commit thread it killed the thread and
    left the commit's future unfinished for ever (fault tests, 2026-12-06)."""
    if isinstance(raised, KafkaError):
        return KafkaException(raised)
    return KafkaException(KafkaError(KafkaError._FAIL, f"the client raised {raised!r}"))

# 1 ms, not librdkafka's 5: an output waits this long at most for its batch (p50 produce ->
# visible 9.7 -> 6.0 ms at 5k msg/s); a loaded loop's bursts fill batches anyway and a
# commit's flush sends at once (the count's msg/s and CPU unchanged: benchmarks/results.md,
# 2026-11-29 16:43-16:57). systems.kafka.producer.linger.ms overrides it.
LINGER_MS = 1


class TrackedProducer:
    """A confluent-kafka Producer with delivery bookkeeping (one per process or per task)."""

    def __init__(self, config: Mapping[str, Any], ends: EndsLookup | None = None) -> None:
        conf: dict[str, Any] = {
            "linger.ms": LINGER_MS,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "enable.idempotence": True,
            "message.timeout.ms": 120_000,
            "queue.buffering.max.messages": 500_000,
        }
        conf.update(config)
        if "transactional.id" in conf:
            # Connect to each broker as soon as it is known. With sparse connections (the
            # default) init_transactions' coordinator lookup found no broker connected in
            # about half the runs (the bootstrap connection had just been replaced by one to
            # the broker's own id, not made yet) and waited for librdkafka's 0.5 s retry
            # timer: 0.5 s or 0.05 s per task start; dense, 3-10 ms in 32 of 32.
            conf.setdefault("enable.sparse.connections", False)
        conf["on_delivery"] = self._on_delivery
        # The last offsets from the partitions' ends instead of per-record reports: only a
        # transactional producer is the sole writer of its partitions (see module doc).
        self._ends = ends if "transactional.id" in conf else None
        if self._ends is not None:
            conf["delivery.report.only.error"] = True
        self._watched: set[str] = set()  # topics whose last offsets are asked for
        self._unresolved: dict[TopicPart, int] = {}  # records sent there since the last ask
        base = conf.get("logger")  # a job's log, whose listener watches connections
        if base is None or isinstance(base, clients.LibrdkafkaLog):
            conf["logger"] = (base or clients.LibrdkafkaLog()).also(self._on_log)
        self._user_error_cb = conf.get("error_cb", log_client_error)
        conf["error_cb"] = self._on_error
        self.transactional = "transactional.id" in conf
        self.name = str(conf.get("transactional.id", "producer"))
        self._producer = clients.producer(conf)
        self._errors: list[str] = []
        self._denial: tuple[KafkaError, str] | None = None  # the first delivery denied
        self._denied_err: KafkaError | None = None  # a denial reported by error_cb
        self._failed_topic: str | None = None  # the topic of the first failed delivery
        self._denied_topic: str | None = None  # the topic a transaction was denied
        self._last: dict[tuple[str, int], int] = {}
        # What the failed deliveries since the last check were: a record Kafka refused (its
        # size, a policy) or Kafka not answering (purged records, the transaction's other
        # victims, are neither)
        self._refused = self._unreachable = False
        self.fatal: KafkaError | None = None
        self.sent = 0
        self.acked = 0
        self.delivery_errors = 0  # records Kafka did not accept (each also stops the commit)
        # topic -> what to add to a "message too large" error of a record for it (a store's
        # changelog: the store and the options that bound its values)
        self.too_large_hints: dict[str, str] = {}

    # librdkafka callbacks: they must never raise (an exception escaping one surfaces later
    # as an unrelated SystemError), so each records what it saw and returns.
    def _on_error(self, err: KafkaError) -> None:
        try:
            if err.fatal() and self.fatal is None:
                self.fatal = err
            if is_denied(err) and not err.fatal() and self._denied_err is None:
                # A transaction denied a topic (AddPartitionsToTxn): its records are then
                # purged, and their delivery reports say only _PURGE_QUEUE.
                self._denied_err = err
            if self.transactional and err.fatal():
                log.info("producer %s: %s", self.name, err.str())
            else:
                self._user_error_cb(err)
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("producer %s error callback failed: %s", self.name, exc)

    def _on_log(self, facility: str, text: str) -> None:
        """A transaction denied a topic (AddPartitionsToTxn): librdkafka only logs it (which
        topic, which error), then purges the records; keep it to name the denial."""
        try:
            if facility not in ("ADDPARTS", "TXNERR") or "authorization failed" not in text.lower():
                return
            topic = _ADDPARTS_TOPIC.search(text)
            if topic and self._denied_topic is None:
                self._denied_topic = topic.group(1)
            code = _ERROR_NAME.search(text)
            if code and self._denied_err is None and hasattr(KafkaError, code.group(1)):
                self._denied_err = KafkaError(getattr(KafkaError, code.group(1)), text)
        except Exception as exc:  # noqa: BLE001 - see _on_error
            log.warning("producer %s log listener failed: %s", self.name, exc)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        try:
            if err is not None:
                self.delivery_errors += 1
                if err.code() in _PURGED:
                    pass
                elif is_unavailable(err):
                    self._unreachable = True
                else:
                    self._refused = True
                if is_denied(err) and self._denial is None:
                    self._denial = (err, msg.topic() or "?")
                if self._failed_topic is None:
                    self._failed_topic = msg.topic()
                where = f"{msg.topic()}[{msg.partition()}]"
                self._errors.append(f"{where} key={msg.key()!r}: {err.str()}"
                                    f"{self._too_large_hint(err, msg.topic())}")
                return
            self.acked += 1
            tp = (msg.topic(), msg.partition())
            offset = msg.offset()
            if offset is not None and offset > self._last.get(tp, -1):  # type: ignore[arg-type]
                self._last[tp] = offset  # type: ignore[index]
        except Exception as exc:  # noqa: BLE001 - see _on_error
            self._errors.append(f"delivery callback failed: {exc}")

    def _fenced(self, exc: BaseException | None = None) -> KafkaClientError:
        """The error to raise once this producer can no longer write: fenced (an ordinary
        event), or denied its transactional id or cluster access (fatal, named)."""
        err = self.fatal
        if err is None and isinstance(exc, KafkaException):
            err = exc.args[0]
        if err is not None and is_denied(err):
            return denied(err, self.name, "Write" if self.transactional else "IdempotentWrite")
        what = err.str() if err is not None else f"{type(exc).__name__}: {exc}"
        return ProducerFencedError(
            f"producer {self.name} was fenced or failed fatally ({what}); another process "
            "owns its task now, or the task must be reopened")

    def _check_fatal(self, exc: BaseException) -> None:
        """Turn a fatal client error (or a SystemError hiding one) into ProducerFencedError."""
        if self.fatal is not None or isinstance(exc, SystemError):
            raise self._fenced(exc) from exc
        if isinstance(exc, KafkaException) and (
                exc.args[0].fatal() or exc.args[0].code() == KafkaError._FATAL):
            # _FATAL: produce() refused because the instance already failed fatally (fenced),
            # possibly before error_cb reported it.
            raise self._fenced(exc) from exc

    def send(
        self, topic: str, partition: int | None, key: bytes | None, value: bytes | None,
        headers: Headers | None = None, timestamp: int | None = None,
    ) -> None:
        """Queue one record (``timestamp`` in ms; None or negative: now); waits for queue
        space rather than dropping it."""
        produce = self._producer.produce
        part = -1 if partition is None else partition
        while True:
            try:
                if timestamp is not None and timestamp > 0:
                    produce(topic, value, key, part, timestamp=timestamp,
                            headers=list(headers) if headers else None)
                elif headers:
                    produce(topic, value, key, part, headers=list(headers))
                else:
                    produce(topic, value, key, part)
                break
            except BufferError:  # full (bytes or count): deliveries free it within ms
                self._poll(0.005)
            except (KafkaException, SystemError) as exc:
                raise self._refused_record(exc, topic, part, key, value) from exc
            except:  # noqa: E722 - see as_exception (not through _client: the hot path)
                raise self._refused_record(as_exception(sys.exc_info()[1]), topic, part, key,
                                           value) from None
        self.sent += 1
        if topic in self._watched:
            if part < 0:
                raise ValueError(f"a record for {topic} needs its partition: its last "
                                 "offset is read from that partition's end")
            unresolved = self._unresolved
            unresolved[(topic, part)] = unresolved.get((topic, part), 0) + 1
        if self.sent & 0x3FF == 0:
            self._poll(0)

    def _refused_record(self, exc: Exception, topic: str, part: int, key: bytes | None,
                        value: bytes | None) -> KafkaClientError:
        """The error for a record ``produce()`` refused: fenced, the transaction to abort,
        or the record itself (named by topic, partition and key)."""
        self._check_fatal(exc)
        assert isinstance(exc, KafkaException)
        err: KafkaError = exc.args[0]
        if self.transactional and (err.txn_requires_abort() or err.code() == KafkaError._STATE):
            # The open transaction failed earlier (a delivery error or timeout): raise that
            # (a data error), else abort and replay the transaction.
            self.raise_errors()
            return TransactionAbortedError(
                f"producer {self.name}: the transaction must be aborted ({err.str()})",
                unavailable=True)
        size = len(value) if value is not None else 0
        return DeliveryError(
            f"Kafka rejected a record for {topic}[{part}] key={(key or b'')[:60]!r} "
            f"({size} bytes): {err.str()}{self._too_large_hint(err, topic)}")

    def _too_large_hint(self, err: KafkaError, topic: str | None) -> str:
        """``; <hint>`` for a record too large for ``topic`` that has a hint, else ''."""
        if err.code() != KafkaError.MSG_SIZE_TOO_LARGE or topic not in self.too_large_hints:
            return ""
        return f"; {self.too_large_hints[topic]}"

    def _client(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on the librdkafka client, whatever it raises coming out as an
        exception (see ``as_exception``). Every client call but ``produce`` goes here."""
        try:
            return call(*args)
        except BaseException:
            raise
        except:  # noqa: E722 - not an exception at all: see as_exception
            raise as_exception(sys.exc_info()[1]) from None

    def _poll(self, timeout: float) -> None:
        try:
            self._client(self._producer.poll, timeout)
        except (KafkaException, SystemError) as exc:
            self._check_fatal(exc)
            raise

    def _flush(self, timeout: float) -> int:
        if self.fatal is not None:
            raise self._fenced()
        try:
            return int(self._client(self._producer.flush, timeout))
        except (KafkaException, SystemError) as exc:
            self._check_fatal(exc)
            raise

    def poll(self) -> None:
        """Serve delivery callbacks without blocking."""
        self._poll(0)

    def flush_and_check(self, timeout: float = 120.0) -> None:
        """Wait until every queued record is acknowledged; raise the first delivery error."""
        deadline = time.monotonic() + timeout
        remaining = self._flush(timeout)
        while remaining and time.monotonic() < deadline:
            remaining = self._flush(max(0.1, deadline - time.monotonic()))
        if self.fatal is not None:
            raise self._fenced()
        self.raise_errors()
        if remaining:
            if self.transactional:  # Kafka did not answer: abort and replay the transaction
                raise TransactionAbortedError(
                    f"producer {self.name}: {remaining} record(s) not acknowledged within "
                    f"{timeout:.0f}s", unavailable=True)
            raise DeliveryError(
                f"{remaining} produced record(s) were not acknowledged within {timeout:.0f}s; "
                "the commit is abandoned so nothing unacknowledged is checkpointed"
            )

    def raise_errors(self) -> None:
        """Raise :class:`DeliveryError` if any delivery failed since the last call
        (:class:`AuthorizationError` if Kafka denied writing to the topic)."""
        if self._denial is None and self._denied_err is not None and self._errors:
            self._denial = (self._denied_err,
                            self._denied_topic or self._failed_topic or "?")
        if self._denial is not None:
            (err, topic), self._denial = self._denial, None
            self._denied_err = self._failed_topic = self._denied_topic = None
            self._errors.clear()
            raise denied(err, topic, "Write")
        if self._errors:
            errors, self._errors = self._errors, []
            refused, unreachable = self._refused, self._unreachable
            self._refused = self._unreachable = False
            self._failed_topic = None
            more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
            if self.transactional and not refused:
                # Timed out while Kafka was away (or purged with the transaction): nothing is
                # wrong with the records; the transaction holding them is aborted and
                # replayed from the last commit.
                raise TransactionAbortedError(
                    f"producer {self.name}: Kafka did not acknowledge its records: "
                    f"{errors[0]}{more}", unavailable=unreachable)
            raise DeliveryError(f"Kafka did not accept a record: {errors[0]}{more}")

    def _forget_errors(self) -> None:
        """Drop what the failed deliveries of an abandoned transaction said (and which
        partitions it wrote: its records are aborted, their offsets never checkpointed)."""
        self._unresolved.clear()
        self._errors.clear()
        self._refused = self._unreachable = False
        self._denial = self._denied_err = self._failed_topic = self._denied_topic = None

    def watch_offsets(self, topic: str) -> None:
        """Know the last offset written to each partition of ``topic`` (a changelog): with
        ``ends``, its records must name their partition; without, every record's is known."""
        if self._ends is not None:
            self._watched.add(topic)

    @property
    def unresolved(self) -> list[TopicPart]:
        """Watched partitions written since their end was last read."""
        return list(self._unresolved)

    def resolve_ends(self, ends: Mapping[TopicPart, int] | None = None) -> None:
        """Read the ends of the watched partitions written since the last read (or take
        them from ``ends``, read for several producers at once) and make them the last
        offsets. Call after a successful flush. Each end is checked against the records
        sent: the last offset moves on by at least as many (each record takes an offset)."""
        if not self._unresolved or self._ends is None:
            return
        deadline = time.monotonic() + ENDS_WAIT_S
        while True:
            given = ends or {}
            got = {tp: given[tp] for tp in self._unresolved if tp in given}
            missing = [tp for tp in self._unresolved if tp not in got]
            if missing:
                got.update(self._ends(missing))
            known = self._last
            behind = [(tp, got[tp] - 1, known.get(tp, -1) + n) for tp, n in
                      self._unresolved.items() if got[tp] - 1 < known.get(tp, -1) + n]
            if not behind:
                break
            if time.monotonic() >= deadline:
                (topic, partition), at, need = behind[0]
                raise TransactionAbortedError(
                    f"producer {self.name}: {topic}[{partition}] ends at offset {at}, before "
                    f"its last record (at least {need}); the transaction is replayed",
                    unavailable=True)
            ends = None
            time.sleep(0.05)
        for tp in self._unresolved:
            self._last[tp] = got[tp] - 1
        self._unresolved.clear()

    def last_offset(self, topic: str, partition: int) -> int | None:
        """The offset of the last record produced to ``topic[partition]`` and acknowledged, if
        any (a watched partition's is read from its end: call after a successful flush)."""
        if (topic, partition) in self._unresolved:
            self.resolve_ends()
        return self._last.get((topic, partition))

    # Transactions: errors become ProducerFencedError / TransactionAbortedError. A call that
    # times out or fails retriably (a coordinator moving or loading, a broker restarting) is
    # not retried here while the run loop cannot poll: the transaction is abandoned as
    # aborted, and the task reopens from what was committed, whichever way the call went.
    def _txn(self, what: str, call: Any, *args: Any) -> None:
        if self.fatal is not None:
            raise self._fenced()
        try:
            self._client(call, *args)
        except (KafkaException, SystemError) as exc:
            self._check_fatal(exc)
            assert isinstance(exc, KafkaException)
            error: KafkaError = exc.args[0]
            if error.txn_requires_abort() or error.retriable() \
                    or error.code() == KafkaError._TIMED_OUT:
                raise TransactionAbortedError(
                    f"producer {self.name}: {what} failed: {error.str()}",
                    unavailable=not error.txn_requires_abort()) from exc
            raise

    def init_transactions(self, timeout: float = 60.0) -> None:
        """Register the transactional id: fences its previous owner, aborts its open txn."""
        self._txn("init_transactions", self._producer.init_transactions, timeout)

    def begin_transaction(self) -> None:
        self._txn("begin_transaction", self._producer.begin_transaction)

    def commit_transaction(self, timeout: float = 30.0) -> None:
        """Commit the open transaction; delivery errors inside it raise first."""
        self.flush_and_check(max(timeout, 120.0))
        self._txn("commit_transaction", self._producer.commit_transaction, timeout)

    def abort_transaction(self, timeout: float = 30.0) -> None:
        """Abort the open transaction (best effort: a fenced producer has none to abort)."""
        self._forget_errors()
        if self.fatal is not None:
            return
        try:
            self._client(self._producer.abort_transaction, timeout)
        except (KafkaException, SystemError) as exc:
            log.warning("producer %s: abort_transaction failed: %s", self.name, exc)

    def close(self, timeout: float = 30.0) -> None:
        """Flush what is queued (best effort) and release the client."""
        if self.fatal is not None:
            self.discard()
            return
        try:
            self._client(self._producer.flush, timeout)
        except (KafkaException, SystemError) as exc:
            log.warning("producer %s: flush at close failed: %s", self.name, exc)

    def discard(self) -> None:
        """Drop every queued record without waiting (closing a task without a commit)."""
        try:
            self._client(self._producer.purge)
            self._client(self._producer.flush, 0)
        except (KafkaException, SystemError) as exc:
            log.debug("producer %s: purge failed: %s", self.name, exc)
        self._forget_errors()


def resolve_together(producers: Sequence[TrackedProducer]) -> None:
    """Read the watched partitions' ends of several producers that share one ``ends`` with
    one call (one request per leader, not one per producer). A failed read is left to each
    producer's own (its transaction alone is then aborted)."""
    waiting = [p for p in producers
               if isinstance(p, TrackedProducer) and p._unresolved and p._ends is not None]
    lookups = {id(p._ends): p._ends for p in waiting}
    if len(waiting) < 2 or len(lookups) != 1:
        return
    lookup = next(iter(lookups.values()))
    assert lookup is not None
    try:
        ends = lookup([tp for p in waiting for tp in p._unresolved])
    except TransactionAbortedError:
        return
    for p in waiting:
        p.resolve_ends(ends)

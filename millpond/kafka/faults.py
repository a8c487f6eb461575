"""What Kafka's clients report where it cannot be raised, and the denials they return.

librdkafka reports connection-level failures through each client's ``error_cb`` and a
rebalance callback's exceptions cannot escape ``consume()``; :class:`ClientFaults` keeps
them (one per job: every client a :class:`millpond.job.Job` makes reports to it) for the
caller to raise between polls. Authentication and TLS failures and protocol mismatches are
fatal: librdkafka would retry them forever.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError

from millpond.kafka.connection import PLAINTEXT_TO_TLS, Diagnosis, classify, describe
from millpond.kafka.denials import denied, is_denied
from millpond.kafka.errors import AuthenticationError, AuthorizationError, KafkaClientError
from millpond.kafka.probe import speaks_plaintext_kafka, speaks_tls
from millpond.kafka.producer import log_client_error

log = logging.getLogger("millpond.kafka")

PROBE_EVERY_S = 5.0  # a suspected protocol mismatch: how often its listener is asked
_UNREACHABLE = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


class ClientFaults:
    """The first fatal problem any of a job's clients reported, kept to be raised.

    A failure to connect that no retry can mend (a wrong password, an untrusted
    certificate, a protocol mismatch: :mod:`millpond.kafka.connection`) is read from the
    clients' ``error_cb`` and their ``FAIL`` log lines (:meth:`on_log`, the listener of the
    job's :class:`~millpond.kafka.clients.LibrdkafkaLog`)."""

    def __init__(self, group_id: str = "", bootstrap: str = "", system: str = "kafka",
                 ca_location: str | None = None) -> None:
        self.group_id = group_id
        self.bootstrap = bootstrap
        self.system = system
        self.ca_location = ca_location
        self.fatal: KafkaError | None = None
        self.auth: AuthenticationError | None = None
        self.callback_error: BaseException | None = None
        self._probed: dict[tuple[str, str], float] = {}  # (kind, address) -> when

    def on_client_error(self, err: KafkaError) -> None:
        """librdkafka's ``error_cb``: log it; keep the first fatal one, and a failure to
        authenticate, to set up TLS or to speak the listener's protocol as fatal too."""
        diagnosis = classify(err.str(), err.code())
        if diagnosis is not None and self._believe(diagnosis):
            return
        if self.auth is not None and err.code() in _UNREACHABLE:
            return  # the cause is known, and raised: no "unreachable, retrying" beside it
        log_client_error(err)
        if err.fatal() and self.fatal is None:
            self.fatal = err

    def on_log(self, facility: str, text: str) -> bool:
        """A librdkafka log line: a ``FAIL`` line may tell what ``error_cb`` does not (a
        plaintext client on a TLS port is only logged). True if the line is explained by
        the failure kept here (its error says it once)."""
        if facility != "FAIL":
            return False
        diagnosis = classify(text)
        return diagnosis is not None and self._believe(diagnosis)

    def _believe(self, diagnosis: Diagnosis) -> bool:
        """Keep ``diagnosis`` as the fatal failure if it holds (a suspected mismatch once
        the listener confirms it, asked at most every :data:`PROBE_EVERY_S`); True if it
        was kept (now or before)."""
        if self.auth is not None:
            return True
        if diagnosis.confirm and not self._confirmed(diagnosis):
            return False
        self.auth = describe(diagnosis, self.bootstrap or "?", self.system, self.ca_location)
        log.info("stopping: %s", self.auth)  # the error raised says it as the one line
        return True

    def _confirmed(self, diagnosis: Diagnosis) -> bool:
        key = (diagnosis.kind, diagnosis.address)
        now = time.monotonic()
        if not diagnosis.address or now - self._probed.get(key, -PROBE_EVERY_S) < PROBE_EVERY_S:
            return False
        self._probed[key] = now
        probe = speaks_tls if diagnosis.kind == PLAINTEXT_TO_TLS else speaks_plaintext_kafka
        return probe(diagnosis.address) is True

    def raise_auth(self) -> None:
        """Raise a recorded authentication or TLS failure, if any."""
        if self.auth is not None:
            raise self.auth

    def check(self) -> None:
        """Raise a rebalance callback's error, an authentication failure, or a fatal client
        error."""
        if self.callback_error is not None:
            error, self.callback_error = self.callback_error, None
            raise error
        self.raise_auth()
        if self.fatal is not None:
            raise KafkaClientError(
                f"fatal Kafka client error, stopping: {self.fatal.str()} (state is safe: the "
                "next start restores from the checkpoint)")

    def consumer_error(self, err: KafkaError, topic: str | None) -> AuthorizationError | None:
        """The denial a consumer error event stands for (its topic, else the group)."""
        if not is_denied(err):
            return None
        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED or not topic:
            return denied(err, self.group_id or "?", "Read")
        return denied(err, topic, "Read")

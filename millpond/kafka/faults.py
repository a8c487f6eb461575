"""What Kafka's clients report where it cannot be raised, and the denials they return.

librdkafka reports connection-level failures through each client's ``error_cb`` and a
rebalance callback's exceptions cannot escape ``consume()``; :class:`ClientFaults` keeps
them (one per job: every client a :class:`millpond.job.Job` makes reports to it) for the
caller to raise between polls. Authentication and TLS failures are fatal: librdkafka would
retry them forever.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError

from millpond.kafka.denials import denied, is_denied
from millpond.kafka.errors import AuthenticationError, AuthorizationError, KafkaClientError
from millpond.kafka.producer import log_client_error

log = logging.getLogger("millpond.kafka")

class ClientFaults:
    """The first fatal problem any of a job's clients reported, kept to be raised."""

    def __init__(self, group_id: str = "", bootstrap: str = "") -> None:
        self.group_id = group_id
        self.bootstrap = bootstrap
        self.fatal: KafkaError | None = None
        self.auth: AuthenticationError | None = None
        self.callback_error: BaseException | None = None

    def on_client_error(self, err: KafkaError) -> None:
        """librdkafka's ``error_cb``: log it; keep the first fatal one, and an
        authentication or TLS failure as fatal too."""
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            if self.auth is None:
                what = ("authentication failed" if err.code() == KafkaError._AUTHENTICATION
                        else "TLS handshake failed")
                hint = ("check systems.<system>.sasl.* (the mechanism, user and password)"
                        if err.code() == KafkaError._AUTHENTICATION else
                        "check systems.<system>.ssl.ca.location and the broker's certificate")
                self.auth = AuthenticationError(
                    f"{what} with the Kafka brokers at {self.bootstrap or '?'}: {err.str()}; "
                    f"{hint}")
                log.error("%s", self.auth)
            return
        log_client_error(err)
        if err.fatal() and self.fatal is None:
            self.fatal = err

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

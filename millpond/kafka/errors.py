"""Errors of talking to Kafka: topics, deliveries, transactions, reads."""

from __future__ import annotations

from millpond.errors import RUNTIME_FAILURE, USER_ERROR, MillpondError


class KafkaClientError(MillpondError):
    """Base class for errors of millpond's Kafka clients (admin, producer, readers): a
    runtime failure unless a subclass says otherwise."""


class ClientSettingsError(KafkaClientError):
    """librdkafka refused a client's settings (a value, or two that disagree); the message
    names where each setting it cites was set. A user error: nothing was started."""

    exit_code = USER_ERROR


class TopicError(KafkaClientError):
    """A topic the job needs cannot serve: a missing input, unequal input partition counts,
    or a changelog/checkpoint topic with the wrong partition count or cleanup policy: the
    job's topics do not fit the job, the operator's to fix (exit 2)."""

    exit_code = USER_ERROR


class TopicUnavailableError(TopicError):
    """Kafka could not describe, create or grow a topic the job needs, or its metadata did
    not show a created topic in time: a runtime failure."""

    exit_code = RUNTIME_FAILURE


class OutputTopicError(TopicError):
    """An output topic a task sends to does not exist and could not be created (while the
    job runs: a runtime failure)."""

    exit_code = RUNTIME_FAILURE


class DeliveryError(KafkaClientError):
    """A produced record (changelog, checkpoint or output) was not acknowledged by Kafka.

    Raised before the commit that would have covered it, so nothing is lost silently.
    """


class ReadError(KafkaClientError):
    """A partition could not be read: its offsets stayed unavailable, a fetch failed, or a
    read stalled before the offset it had to reach."""


class ProducerFencedError(KafkaClientError):
    """A task's transactional producer can no longer write: another process took the task
    over (its ``init_transactions`` fenced this one) or the producer hit a fatal error.

    An ordinary event after a rebalance or a pause: the task is closed without committing.
    """


class TransactionAbortedError(KafkaClientError):
    """A task's transaction could not commit and was aborted; nothing of it is visible.

    ``unavailable`` is True when a coordinator did not answer in time (a broker restarting,
    a coordinator moving): the task then waits for the next rebalance or a short hold
    before it reopens.
    """

    def __init__(self, message: str, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class AuthorizationError(KafkaClientError):
    """Kafka denied this principal an operation on a resource (an ACL is missing).

    Fatal and never retried: a retry cannot succeed until someone grants the ACL. The
    message names the resource and the operation, and where to find every ACL the job needs;
    nothing after the last commit was committed, so a restart after the grant is exact.
    """

    def __init__(self, resource: str, name: str, operation: str, detail: str) -> None:
        self.resource, self.name, self.operation = resource, name, operation
        implied = " (Read or Write grants Describe too)" if operation == "Describe" else ""
        super().__init__(
            f"Kafka denied {operation} on {resource} {name}{implied} to this job's principal "
            f"({detail}). "
            f"Grant it (`millpond acls --config <job.properties>` prints every ACL the job "
            "needs) and start again: nothing after the last commit was committed")


class AuthenticationError(KafkaClientError):
    """The client could not authenticate or set up TLS with the brokers (a wrong password,
    an untrusted certificate, a security.protocol the listener does not speak): the job's
    security settings are the operator's to fix (exit 2)."""

    exit_code = USER_ERROR


class TlsCertificateError(AuthenticationError):
    """The broker's TLS certificate is not signed by a CA the client trusts
    (``ssl.ca.location``)."""


class ProtocolMismatchError(AuthenticationError):
    """The client's ``security.protocol`` is not the one the broker's listener speaks: a
    plaintext client on a TLS port, or a TLS client on a plaintext port."""


class BrokerUnreachableError(KafkaClientError):
    """No broker answered within the time allowed (``reason``: the client's last error)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message if "unreachable" in message
                         else f"Kafka broker unreachable: {message}")
        self.reason = reason or message

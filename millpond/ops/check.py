"""``millpond check``: can this job's principal do what the job needs, before it runs?

Connects with the job's settings (authentication and TLS first), then checks every ACL
``millpond acls`` lists for the job, without writing anything: Kafka says which operations
the principal may perform on an existing topic or group (``include_authorized_operations``);
a topic that does not exist yet is checked for Describe and, by a validate-only creation,
Create; the transactional ids by registering a spare one under the job's prefix
(``<group>-check``, never used by a task). What cannot be checked without data (Read or
Write on a topic that does not exist yet) is reported as such, and does not fail the check.
"""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import NewTopic

from millpond.job import Job
from millpond.kafka.admin import TIMEOUT
from millpond.kafka.denials import is_denied
from millpond.kafka.errors import AuthorizationError, BrokerUnreachableError, KafkaClientError
from millpond.kafka.producer import TrackedProducer
from millpond.ops.acls import Acl, required_acls
from millpond.ops.errors import CheckFailedError

OK, MISSING, UNCHECKED = "ok", "MISSING", "unchecked"
_NAMED = 3  # missing ACLs named in the error line (each has its own line above it)
_UNREACHABLE = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


@dataclass(frozen=True)
class Finding:
    """One line of the check: ``status`` of ``acl`` (None: the connection itself)."""

    status: str
    acl: Acl | None
    detail: str = ""

    def what(self) -> str:
        """The ACL in words: ``Read on group g``, ``Write on transactional-id p (prefixed)``."""
        if self.acl is None:
            return "connect"
        a = self.acl
        return (f"{a.operation} on {a.resource} {a.name}"
                + (" (prefixed)" if a.pattern == "prefixed" else ""))

    def line(self, principal: str = "User:<principal>") -> str:
        if self.acl is None:
            return f"{self.status:<9} connect: {self.detail}"
        a = self.acl
        what = self.what()
        more = f"  [{self.detail}]" if self.detail else ""
        if self.status == MISSING:
            more += f"  grant: kafka-acls.sh {a.kafka_acls(principal)}"
        return f"{self.status:<9} {what}{more}"


def _names(ops: Sequence[object]) -> set[str]:
    """Kafka's operation names (``READ``, ``DESCRIBE_CONFIGS``) as kafka-acls.sh writes them
    (``Read``, ``DescribeConfigs``); ``All`` stands for every one."""
    out = set()
    for op in ops:
        name = getattr(op, "name", str(op))
        out.add("".join(part.capitalize() for part in name.split("_")))
    return out


def _allows(allowed: set[str], operation: str) -> bool:
    return "All" in allowed or operation in allowed or (
        operation == "Describe" and bool(allowed & {"Read", "Write", "Delete", "Alter"}))


def _topic(job: Job, name: str) -> tuple[set[str], str]:
    """What the principal may do on topic ``name``; for a topic that does not exist yet,
    Describe and Create, with ``?`` for what cannot be known until it does."""
    future = job.admin.admin.describe_topics(TopicCollection([name]),
                                             include_authorized_operations=True)[name]
    try:
        return _names(future.result(timeout=TIMEOUT).authorized_operations or []), ""
    except KafkaException as exc:
        error = exc.args[0]
        if is_denied(error):
            return set(), ""
        if error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise
    allowed = {"Describe"}  # a denied Describe would have said TOPIC_AUTHORIZATION_FAILED
    if _may_create(job, name):
        allowed.add("Create")
    return allowed | {"?"}, "the topic does not exist yet"


def _may_create(job: Job, name: str) -> bool:
    future = job.admin.admin.create_topics([NewTopic(name, 1, 1)], validate_only=True)[name]
    try:
        future.result(timeout=TIMEOUT)
        return True
    except KafkaException as exc:
        if is_denied(exc.args[0]):
            return False
        return exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def _group(job: Job, name: str) -> set[str]:
    """What the principal may do on group ``name`` (Kafka answers for a group that does not
    exist too); a coordinator still being found is asked again, within :data:`TIMEOUT`."""
    deadline = time.monotonic() + TIMEOUT
    # The coordinator is usually found within tens of ms (a first ask at start often comes
    # before it is): ask again soon, backing off to half a second; a flat 0.5 s was a
    # 0.5 s start-up for one run in five.
    pause = 0.02
    while True:
        future = job.admin.admin.describe_consumer_groups(
            [name], include_authorized_operations=True)[name]
        try:
            return _names(future.result(timeout=TIMEOUT).authorized_operations or [])
        except KafkaException as exc:
            error = exc.args[0]
            if is_denied(error):
                return set()
            if not error.retriable() and error.code() not in _COORDINATOR_MOVING \
                    or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(0.5, pause * 2)


def _denial_line(facility: str, text: str) -> bool:
    """librdkafka's CRITICAL lines about the spare id being denied: the finding says it."""
    return facility in ("TXNERR", "FATAL") and "authorization failed" in text.lower()


def probe_transactional_id(prefix: str) -> str:
    """A transactional id of its own for one check, inside the job's prefix (its ACL):
    processes starting together once shared ``<prefix>check``, and the second registration
    met the first's (CONCURRENT_TRANSACTIONS), which librdkafka retried for 0.5-1.1 s.
    An unused id expires on the broker (``transactional.id.expiration.ms``, 7 days)."""
    return f"{prefix}check-{secrets.token_hex(6)}"


def _transactional_ids(job: Job, prefix: str) -> set[str]:
    """Register a probe id under ``prefix``: allowed if Kafka hands it a producer id."""
    producer = TrackedProducer({**job.producer_conf,
                                "transactional.id": probe_transactional_id(prefix),
                                "transaction.timeout.ms": 60_000, "message.timeout.ms": 50_000,
                                "logger": job.client_conf["logger"].also(_denial_line)})
    try:
        producer.init_transactions(TIMEOUT)
        return {"Write", "Describe"}
    except AuthorizationError:
        return set()
    finally:
        producer.discard()


def principal(job: Job) -> str:
    """The job's principal as ``kafka-acls.sh`` names it (``User:<sasl.username>``)."""
    user = job.client_conf.get("sasl.username")
    return f"User:{user}" if user else "User:<principal>"


def check(job: Job, role: str = "job", outputs: Sequence[str] = (), *,
          raise_connect: bool = False) -> list[Finding]:
    """One finding per ACL ``role`` needs (after a first one for the connection).

    A broker that does not answer raises :class:`BrokerUnreachableError`; a connection
    that fails otherwise (authentication, TLS, protocol) is the first finding, or raised
    with ``raise_connect``."""
    try:
        brokers = job.admin.broker_count()
    except BrokerUnreachableError:
        raise
    except KafkaClientError as exc:
        if raise_connect:
            raise
        return [Finding(MISSING, None, str(exc))]
    try:
        return [Finding(OK, None, f"{job.admin.bootstrap} ({brokers} broker(s))"),
                *_acls(job, role, outputs)]
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() in _UNREACHABLE:
            raise BrokerUnreachableError(
                f"the Kafka brokers at {job.admin.bootstrap} stopped answering during the "
                f"check: {error.str()}") from exc
        raise KafkaClientError(f"millpond check could not ask Kafka: {error.str()}") from exc


def preflight(job: Job) -> list[Finding]:
    """The check ``millpond run`` runs before the job starts (role ``job``): its findings,
    or :class:`CheckFailedError` naming each missing ACL. A failure to connect raises as it
    is (:class:`BrokerUnreachableError`, :class:`AuthenticationError`)."""
    findings = check(job, "job", raise_connect=True)
    missing = [f for f in findings if f.status == MISSING and f.acl is not None]
    if missing:
        who = principal(job)
        named = "; ".join(f.what() for f in missing[:_NAMED])
        more = f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
        raise CheckFailedError(
            f"this job's principal {who} lacks {len(missing)} ACL(s) the job needs: {named}"
            f"{more} (grant: the kafka-acls.sh lines above, or `millpond acls --config "
            "<job.properties>`), then start again; `millpond run --no-check` skips this "
            "check", [f.line(who) for f in missing])
    return findings


def _acls(job: Job, role: str, outputs: Sequence[str]) -> list[Finding]:
    findings: list[Finding] = []
    by_resource: dict[tuple[str, str, str], list[Acl]] = defaultdict(list)
    for acl in required_acls(job.config, role, outputs):
        by_resource[(acl.resource, acl.name, acl.pattern)].append(acl)
    for (resource, name, pattern), acls in by_resource.items():
        note = ""
        if resource == "topic" and pattern == "literal":
            allowed, note = _topic(job, name)
        elif resource == "topic":  # a prefix: only creation can be tried
            allowed = {"Create", "?"} if _may_create(job, f"{name}0") else {"?"}
            note = "prefixed: checked when such a topic exists"
        elif resource == "group":
            allowed = _group(job, name)
        else:
            allowed = _transactional_ids(job, name)
        for acl in acls:
            if _allows(allowed, acl.operation):
                findings.append(Finding(OK, acl))
            elif "?" in allowed:
                findings.append(Finding(UNCHECKED, acl, note))
            else:
                findings.append(Finding(MISSING, acl, note))
    return findings

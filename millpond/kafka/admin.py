"""Topic admin: create changelog and checkpoint topics, and refuse ones that can't work."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic

from millpond.kafka import clients
from millpond.kafka.denials import denied, is_denied
from millpond.kafka.errors import (
    BrokerUnreachableError,
    OutputTopicError,
    TopicError,
    TopicUnavailableError,
)
from millpond.kafka.faults import ClientFaults

TIMEOUT = 30.0
FIRST_WAIT_LINE_S = 5.0  # how long Kafka may not answer at start before the job says so
_SLICE_S = 1.0  # metadata waits are cut into slices to notice an authentication failure


@dataclass(frozen=True)
class TopicSpec:
    """A topic a job needs, made with these settings if it is missing. ``what`` names it
    in errors (changelog, checkpoint, dead-letter, internal, output); ``replication`` None:
    min(3, brokers); a ``compacted`` topic gets ``cleanup.policy=compact`` (unless its
    config says otherwise, which is then refused) and must have ``partitions``."""

    topic: str
    partitions: int
    what: str = "changelog"
    config: Mapping[str, str] = field(default_factory=dict)
    replication: int | None = None
    compacted: bool = True

    def created(self) -> dict[str, str]:
        """The topic config it is created with."""
        return ({"cleanup.policy": "compact", **self.config} if self.compacted
                else dict(self.config))


class TopicAdmin:
    """Creates and checks the topics a job needs, with errors that say how to fix them.

    ``faults``: where the client's ``error_cb`` keeps failures; a metadata wait stops at
    once on an authentication or TLS failure instead of timing out. ``probe_topic``: a
    topic whose metadata answers "is Kafka there, with how many brokers" (it need not
    exist; the job's checkpoint topic); without one those ask for every topic's metadata,
    which on a cluster of a thousand topics costs 10-60 ms a time."""

    def __init__(self, client_config: Mapping[str, Any],
                 faults: ClientFaults | None = None, probe_topic: str | None = None) -> None:
        self.admin = clients.admin(client_config)
        self.faults = faults
        self.bootstrap = str(client_config.get("bootstrap.servers", "?"))
        self.probe_topic = probe_topic

    def wait_reachable(self, timeout_s: float | None, say: Callable[[str], None],
                       every_s: float = 30.0, stopped: Callable[[], bool] = lambda: False,
                       ) -> bool:
        """Block until a broker answers, saying ``waiting for Kafka at <bootstrap>: <why>``
        at most every ``every_s`` seconds; past ``timeout_s`` (None: never) raise
        :class:`BrokerUnreachableError`. Authentication and TLS failures raise at once.
        False if ``stopped()`` became true first (a signal: the caller stops cleanly)."""
        began = time.monotonic()
        waited = False
        said = -every_s
        while True:
            if stopped():
                return False
            left = None if timeout_s is None else timeout_s - (time.monotonic() - began)
            try:
                self._metadata(self.probe_topic,
                               timeout=1.0 if left is None else max(0.0, min(1.0, left)))
            except BrokerUnreachableError as exc:
                if timeout_s is not None and time.monotonic() - began >= timeout_s:
                    raise BrokerUnreachableError(
                        f"no Kafka broker at {self.bootstrap} answered within --wait-timeout "
                        f"{timeout_s:.0f}s ({exc.reason})") from exc
                # The first line after a few seconds: a wrong CA, password or protocol is
                # named by then (a fatal error, not a wait).
                now = time.monotonic()
                if now - began >= FIRST_WAIT_LINE_S and now - said >= every_s:
                    said = now
                    say(f"waiting for Kafka at {self.bootstrap}: {exc.reason}")
                waited = True
                continue
            if waited:
                say(f"Kafka at {self.bootstrap} answers after {time.monotonic() - began:.0f}s")
            return True

    def _metadata(self, topic: str | None = None, timeout: float | None = None) -> Any:
        """Cluster metadata (of ``topic`` only, if given), within ``timeout`` seconds
        (default :data:`TIMEOUT`)."""
        timeout = TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if self.faults is not None:
                self.admin.poll(0)  # serves error_cb, which reports failed authentication
                self.faults.raise_auth()
            try:
                return self.admin.list_topics(topic, timeout=_SLICE_S)
            except KafkaException as exc:
                error = exc.args[0]
                if not (error.retriable() or error.code() in (
                        KafkaError._TRANSPORT, KafkaError._TIMED_OUT)):
                    raise
                if time.monotonic() >= deadline:
                    if self.faults is not None:
                        self.faults.raise_auth()
                    raise BrokerUnreachableError(
                        f"no Kafka broker at {self.bootstrap} answered within {timeout:.0f}s "
                        f"({error.str()}); is it running, and is systems.<system>.bootstrap."
                        "servers (and security.protocol) right?", reason=error.str()) from exc

    def describe_group(self, group: str) -> Any:
        """``group``'s description (members, state), or None if it could not be read; a
        denial is raised, naming the group (a job that cannot be seen is not idle)."""
        try:
            return self.admin.describe_consumer_groups([group])[group].result(timeout=TIMEOUT)
        except KafkaException as exc:
            if is_denied(exc.args[0]):
                raise denied(exc.args[0], group, "Describe") from exc
            return None

    def broker_count(self) -> int:
        return len(self._metadata(self.probe_topic).brokers)

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic``, or None if it does not exist."""
        md = self._metadata(topic).topics.get(topic)
        if md is None:
            return None
        if md.error is not None:
            if is_denied(md.error):
                raise denied(md.error, topic, "Describe")
            if md.error.code() not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                raise TopicUnavailableError(f"topic {topic}: {md.error.str()}")
            return None
        return len(md.partitions)

    def topic_config(self, topic: str) -> dict[str, str]:
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            result = self.admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)
        except KafkaException as exc:
            if is_denied(exc.args[0]):
                raise denied(exc.args[0], topic, "DescribeConfigs") from exc
            raise
        return {name: entry.value for name, entry in result.items()}

    def _created(self, topic: str, future: Any, what: str) -> bool:
        """Wait for a topic creation: True if this created it, False if it existed already
        (fine: another process made it); a denial is named."""
        try:
            future.result(timeout=TIMEOUT)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return False
            if is_denied(error):
                raise denied(error, topic, "Create") from exc
            raise TopicUnavailableError(f"could not create {what} topic {topic}: {exc}") from exc
        return True

    def ensure_compacted(
        self, topic: str, partitions: int, replication: int | None = None,
        config: Mapping[str, str] | None = None, what: str = "changelog",
    ) -> None:
        """Create ``topic`` compacted if missing; raise if it exists but cannot serve."""
        self.ensure_topics([TopicSpec(topic, partitions, what, dict(config or {}), replication)])

    def ensure_topics(self, specs: Sequence[TopicSpec]) -> dict[str, int]:
        """Create the missing topics of ``specs`` in one request (a new job's changelogs,
        checkpoint and internal topics are made side by side, not one round trip each);
        raise if a compacted one exists but cannot serve. Each topic's partition count."""
        found = {s.topic: self.partition_count(s.topic) for s in specs}
        missing = list({s.topic: s for s in reversed(specs) if found[s.topic] is None}.values())
        created: set[str] = set()
        if missing:
            default_rf = (min(3, max(1, self.broker_count()))
                          if any(s.replication is None for s in missing) else 1)
            futures = self.admin.create_topics([
                NewTopic(s.topic, s.partitions, s.replication or default_rf, config=s.created())
                for s in missing])
            for s in missing:
                if self._created(s.topic, futures[s.topic], s.what):
                    created.add(s.topic)
            for s in missing:
                found[s.topic] = self._visible(s.topic, s.what)
        counts = {t: n for t, n in found.items() if n is not None}
        for s in specs:
            if s.compacted:
                policy = (s.created()["cleanup.policy"] if s.topic in created
                          else None)  # as created here, else read back from the broker
                self._check_compacted(s, counts[s.topic], policy)
        return counts

    def _check_compacted(self, spec: TopicSpec, existing: int, policy: str | None) -> None:
        topic, what, partitions = spec.topic, spec.what, spec.partitions
        if existing != partitions:
            raise TopicError(
                f"{what} topic {topic} has {existing} partitions but the job has {partitions} "
                f"tasks (one per input partition); its partition p must hold task p's state. "
                f"Fix: point the store at a new topic, or delete {topic} (its data is lost) "
                f"so millpond recreates it with {partitions} partitions."
            )
        if policy is None:
            policy = self.topic_config(topic).get("cleanup.policy", "")
        if "compact" not in policy.split(","):
            raise TopicError(
                f"{what} topic {topic} has cleanup.policy={policy}; without compaction old "
                f"values are deleted by retention and state would be lost on restore. Fix: "
                f"kafka-configs --alter --entity-type topics --entity-name {topic} "
                f"--add-config cleanup.policy=compact"
            )

    def _visible(self, topic: str, what: str, timeout: float | None = None) -> int:
        """The partition count of a topic just created (or found to exist), once metadata
        shows it; a TopicError after ``timeout`` s. (Checking again by calling
        :meth:`ensure_compacted` recursed without a bound while metadata lagged.)"""
        timeout = TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            count = self.partition_count(topic)
            if count is not None:
                return count
            if time.monotonic() >= deadline:
                raise TopicUnavailableError(
                    f"{what} topic {topic} was created but the cluster's metadata did not show "
                    f"it within {timeout:.0f}s; check the brokers, and that this principal may "
                    "Describe the topic")
            time.sleep(0.1)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (no-op if it has that many already)."""
        from confluent_kafka.admin import NewPartitions

        if (self.partition_count(topic) or 0) >= total:
            return
        future = self.admin.create_partitions([NewPartitions(topic, total)])[topic]
        try:
            future.result(timeout=TIMEOUT)
        except KafkaException as exc:
            raise TopicUnavailableError(f"could not grow topic {topic} to {total} partitions: "
                                      f"{exc}") from exc

    def ensure_topic(self, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
        """Create a plain topic (outputs, dead letters) if it does not exist."""
        self.ensure_topics([TopicSpec(topic, partitions, "output", dict(config or {}),
                                      compacted=False)])


class OutputTopics:
    """Creates each output topic the first time a task sends to it, as changelogs are.

    A missing output gets the job's partition count (one per task) and the replication
    changelogs get by default (min(3, brokers)); create it yourself for another layout.
    When it cannot be created (no permission, a policy), the first send raises
    :class:`OutputTopicError` naming the topic, instead of librdkafka retrying for
    ``message.timeout.ms``.
    """

    def __init__(self, admin: TopicAdmin, partitions: int, bootstrap: str = "<brokers>") -> None:
        self._admin = admin
        self.partitions = partitions
        self._bootstrap = bootstrap
        self._known: set[str] = set()

    def ensure(self, topic: str) -> None:
        """Make sure ``topic`` exists (one metadata call per topic per process)."""
        if topic in self._known:
            return
        try:
            self._admin.ensure_topic(topic, self.partitions)
        except (KafkaException, TopicError) as exc:
            raise OutputTopicError(
                f"output topic {topic} does not exist and could not be created: {exc}. "
                f"Create it: kafka-topics.sh --bootstrap-server {self._bootstrap} --create "
                f"--topic {topic} --partitions {self.partitions}") from exc
        self._known.add(topic)


def check_job_topics(
    admin: TopicAdmin, inputs: list[str], changelogs: Mapping[str, Any],
    checkpoint: str, dead_letter: str | None = None,
    internal: Mapping[str, Mapping[str, str]] | None = None,
) -> int:
    """Check a job's topics before it starts; return its task count.

    Inputs must exist with equal partition counts (task N reads partition N of each);
    ``changelogs`` (topic -> StoreConfig), the checkpoint topic, the dead-letter topic and
    ``internal`` (inputs the job writes itself, a dataflow's key_by topics: topic -> its
    topic config) are created with that many partitions if missing, and refused if they
    cannot serve.
    """
    internal = internal or {}
    counts: dict[str, int] = {}
    for topic in (t for t in inputs if t not in internal):
        n = admin.partition_count(topic)
        if n is None:
            raise TopicError(
                f"input topic {topic} (task.inputs) does not exist; create it with "
                "`millpond topics create --config <job.properties> --partitions N`")
        counts[topic] = n
    if len(set(counts.values())) != 1:
        raise TopicError(
            "inputs must have equal partition counts (task N reads partition N of each): "
            + ", ".join(f"{t}={n}" for t, n in counts.items()))
    tasks = next(iter(counts.values()))
    specs = [TopicSpec(topic, tasks, "changelog", cfg.changelog_topic_config,
                       cfg.changelog_replication_factor) for topic, cfg in changelogs.items()]
    specs.append(TopicSpec(checkpoint, tasks, "checkpoint"))
    if dead_letter:
        specs.append(TopicSpec(dead_letter, tasks, "dead-letter", compacted=False))
    specs += [TopicSpec(topic, tasks, "internal", config, compacted=False)
              for topic, config in internal.items()]
    made = admin.ensure_topics(specs)
    for topic in internal:
        if made[topic] != tasks:
            raise TopicError(
                f"internal topic {topic} has {made[topic]} partitions but the job has {tasks} "
                f"tasks; delete it (what it holds was not yet processed) or give it {tasks}")
    return tasks

"""The API every layer shares: the StreamTask interface, envelopes, partitions, serde pairs.

A leaf module: it imports nothing of millpond at run time (only types, for annotations), so
the runtime, side inputs, the streams API and the tools can all build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from millpond.config import Config
    from millpond.serdes.api import Serde
    from millpond.stores.api import KeyValueStore


class SerdePair(NamedTuple):
    """A stream's or a store's key and message serdes (``None``: raw bytes pass through)."""

    key: Serde[Any] | None
    msg: Serde[Any] | None


@dataclass(frozen=True)
class SystemStreamPartition:
    """An input partition: ``system``, ``stream`` (topic) and ``partition``."""

    system: str
    stream: str
    partition: int


@dataclass(slots=True)
class IncomingMessageEnvelope:
    """One input message, deserialized with the stream's serdes."""

    stream: str
    partition: int
    offset: int
    key: Any
    message: Any
    timestamp: int | None = None
    headers: Sequence[tuple[str, bytes]] = ()
    system: str = "kafka"

    @property
    def system_stream_partition(self) -> SystemStreamPartition:
        return SystemStreamPartition(self.system, self.stream, self.partition)


@dataclass
class OutgoingMessageEnvelope:
    """A message to send: ``stream`` is ``"kafka.<topic>"`` or a bare topic.

    ``partition`` None: the job's partitioner (``job.partitioner``, default murmur2 as
    Kafka's Java client) on the serialized key. ``timestamp`` (ms) None or negative: the
    time it is sent.
    """

    stream: str
    message: Any
    key: Any = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes]] = field(default_factory=tuple)
    timestamp: int | None = None


class MessageCollector:
    """Sends output messages; they are flushed and checked before each commit."""

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        raise NotImplementedError

    def send_record(self, stream: str, key: Any, message: Any, timestamp: int | None) -> None:
        """``send`` of a record with no partition or headers, without making an envelope
        (the streams API's outputs: a collector may serve it faster)."""
        self.send(OutgoingMessageEnvelope(stream, message, key, timestamp=timestamp))

    def record_sender(self, stream: str) -> Callable[[Any, Any, int | None], None]:
        """``send_record`` bound to ``stream``: ``sender(key, message, timestamp)``, which a
        collector may serve with the stream's topic and serdes looked up once."""
        return partial(self.send_record, stream)


class TaskCoordinator:
    """Lets a task ask for a commit or a shutdown of the container."""

    def __init__(self) -> None:
        self.commit_requested = False
        self.shutdown_requested = False

    def commit(self) -> None:
        """Commit this task's state, outputs and offsets after the current message."""
        self.commit_requested = True

    def shutdown(self) -> None:
        """Stop the container cleanly (final commit) after the current message."""
        self.shutdown_requested = True


@dataclass
class TaskContext:
    """What ``StreamTask.init`` receives: the task's stores, name, partition and config."""

    task_name: str
    partition: int
    config: Config
    stores: Mapping[str, KeyValueStore]
    metrics: dict[str, float] = field(default_factory=dict)

    def get_store(self, name: str) -> KeyValueStore:
        """The store ``name`` configured under ``stores.<name>.*``."""
        try:
            return self.stores[name]
        except KeyError:
            known = ", ".join(sorted(self.stores)) or "none"
            raise KeyError(f"no store named {name!r} is configured (stores: {known})") from None


class StreamTask:
    """Subclass this; one instance runs per input partition (task).

    ``process`` is called for every message; ``window`` every ``task.window.ms`` (never
    concurrently with ``process``); ``on_end_of_stream`` once all inputs are exhausted
    when the job runs with bounded inputs; ``close`` when the task stops.
    """

    def init(self, context: TaskContext) -> None:
        """Called once before any message; fetch stores here."""

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector,
        coordinator: TaskCoordinator,
    ) -> None:
        raise NotImplementedError

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called every ``task.window.ms``."""

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called when every input partition of the task reached its end (bounded runs)."""

    def close(self) -> None:
        """Called when the task stops (shutdown or partition revoked)."""

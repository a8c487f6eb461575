"""The task runtime: the StreamTask API, envelopes, collector, coordinator, container."""

from millpond.tasks.api import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    SystemStreamPartition,
    TaskContext,
    TaskCoordinator,
)

__all__ = [
    "IncomingMessageEnvelope",
    "MessageCollector",
    "OutgoingMessageEnvelope",
    "StreamTask",
    "SystemStreamPartition",
    "TaskContext",
    "TaskCoordinator",
]

"""The StreamTask runtime: container, run loop, task manager, commits, opening tasks.

The API it runs (``StreamTask``, envelopes, ...) lives in :mod:`millpond.api`; these
names are re-exported here for compatibility."""

from millpond.api import (
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

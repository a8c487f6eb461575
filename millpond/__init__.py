"""millpond: Samza-style stateful stream processing for Python."""

from millpond.tasks.api import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    TaskContext,
    TaskCoordinator,
)

__version__ = "0.1.0"

__all__ = [
    "IncomingMessageEnvelope",
    "MessageCollector",
    "OutgoingMessageEnvelope",
    "StreamTask",
    "TaskContext",
    "TaskCoordinator",
    "__version__",
]

"""millpond: Samza-style stateful stream processing for Python."""

from millpond.api import (
    IncomingMessageEnvelope,
    MessageCollector,
    OutgoingMessageEnvelope,
    StreamTask,
    TaskContext,
    TaskCoordinator,
)
from millpond.errors import MillpondError

__version__ = "0.1.0"

__all__ = [
    "IncomingMessageEnvelope",
    "MillpondError",
    "MessageCollector",
    "OutgoingMessageEnvelope",
    "StreamTask",
    "TaskContext",
    "TaskCoordinator",
    "__version__",
]

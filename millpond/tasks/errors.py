"""Errors of the task runtime."""

from __future__ import annotations

from millpond.errors import MillpondError


class TaskError(MillpondError):
    """Base class for task runtime errors."""


class TaskConfigError(TaskError):
    """The job cannot start as configured (task.class, inputs, partitions)."""


class MessageError(TaskError):
    """A message could not be deserialized or processed; names where it is."""

    def __init__(self, topic: str, partition: int, offset: int, cause: BaseException, stage: str):
        self.topic, self.partition, self.offset, self.cause, self.stage = (
            topic, partition, offset, cause, stage)
        super().__init__(
            f"{stage} failed for {topic}[{partition}] at offset {offset}: "
            f"{type(cause).__name__}: {cause}. Nothing after offset {offset - 1} was committed; "
            + ("fix the data or the serde, or set task.drop.deserialization.errors=true (skip "
               "such messages) or task.dlq.stream (send them to a dead-letter topic)."
               if stage == "deserialization" else
               "fix the code, or set task.dlq.stream to send such messages to a dead-letter "
               "topic and go on.")
        )

"""Errors of the task runtime."""

from __future__ import annotations


class TaskError(Exception):
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
            "fix the task or set task.drop.deserialization.errors / task.dlq.stream."
        )


class JobNeverRanError(TaskError):
    """``millpond status`` found no checkpoint and no running process of the job."""


class TopicCreateError(TaskError):
    """``millpond topics create`` could not create a topic (names it and Kafka's reason)."""

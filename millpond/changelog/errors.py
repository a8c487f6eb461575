"""Errors of changelogs, checkpoints and restore."""

from __future__ import annotations


class ChangelogError(Exception):
    """Base class for changelog, checkpoint and restore errors."""


class ChangelogTopicError(ChangelogError):
    """A topic the job needs cannot serve: a missing input, unequal input partition counts,
    or a changelog/checkpoint topic with the wrong partition count or cleanup policy."""


class OutputTopicError(ChangelogTopicError):
    """An output topic a task sends to does not exist and could not be created."""


class DeliveryError(ChangelogError):
    """A produced record (changelog, checkpoint or output) was not acknowledged by Kafka.

    Raised before the commit that would have covered it, so nothing is lost silently.
    """


class CheckpointError(ChangelogError):
    """A checkpoint could not be read or written."""


class ChangelogLostError(ChangelogError):
    """The changelog lost records the checkpoint says were written (deleted or truncated)."""


class StoreLockedError(ChangelogError):
    """Another process holds the local store directory of this task."""


class ProducerFencedError(ChangelogError):
    """A task's transactional producer can no longer write: another process took the task
    over (its ``init_transactions`` fenced this one) or the producer hit a fatal error.

    An ordinary event after a rebalance or a pause: the task is closed without committing.
    """


class TransactionAbortedError(ChangelogError):
    """A task's transaction could not commit and was aborted; nothing of it is visible.

    ``unavailable`` is True when a coordinator did not answer in time (a broker restarting,
    a coordinator moving): the task then waits for the next rebalance or a short hold
    before it reopens.
    """

    def __init__(self, message: str, unavailable: bool = False) -> None:
        super().__init__(message)
        self.unavailable = unavailable


class GenerationError(ChangelogError):
    """The tasks' checkpoints name different changelog topics (generations) for one store."""

"""Errors of changelogs, checkpoints and restore."""

from __future__ import annotations


class ChangelogError(Exception):
    """Base class for changelog, checkpoint and restore errors."""


class ChangelogTopicError(ChangelogError):
    """An existing changelog topic cannot back the store (partition count, cleanup policy)."""


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

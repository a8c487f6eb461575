"""Errors of changelogs, checkpoints and restore."""

from __future__ import annotations

from millpond.errors import MillpondError


class ChangelogError(MillpondError):
    """Base class for changelog, checkpoint and restore errors."""


class CheckpointError(ChangelogError):
    """A checkpoint could not be read or written."""


class ChangelogLostError(ChangelogError):
    """The changelog lost records the checkpoint says were written (deleted or truncated)."""


class StoreLockedError(ChangelogError):
    """Another process holds the local store directory of this task."""


class GenerationError(ChangelogError):
    """The tasks' checkpoints name different changelog topics (generations) for one store."""


class BadChangelogRecordError(ChangelogError):
    """A changelog record being restored does not decode with the store's serdes
    (``stores.<store>.changelog.bad.records=fail``)."""

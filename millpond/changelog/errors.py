"""Errors of changelogs, checkpoints and restore."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class ChangelogError(MillpondError):
    """Base class for changelog, checkpoint and restore errors."""


class CheckpointError(ChangelogError):
    """A checkpoint could not be read or written."""


class ChangelogLostError(ChangelogError):
    """The changelog lost records the checkpoint says were written (deleted or truncated)."""


class StoreLockedError(ChangelogError):
    """Another process holds the local store directory of this task (nothing changed)."""

    exit_code = USER_ERROR


class GenerationError(ChangelogError):
    """The tasks' checkpoints name different changelog topics (generations) for one store."""


class BadChangelogRecordError(ChangelogError):
    """A changelog record being restored does not decode with the store's serdes
    (``stores.<store>.changelog.bad.records=fail``)."""


class ChangelogRefusedError(ChangelogError):
    """A command (or a job's start) refused what it cannot do: a store or topic it names does
    not exist, nothing to re-seed from; nothing changed (exit 2)."""

    exit_code = USER_ERROR


class CheckpointRefusedError(CheckpointError):
    """``checkpoint set|drop`` refused what it cannot mean or may not do now (an offset out
    of range, a partition the job does not have, a running job); nothing written (exit 2)."""

    exit_code = USER_ERROR

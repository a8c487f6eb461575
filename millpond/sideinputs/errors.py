"""Errors of side-input stores."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class SideInputsError(MillpondError):
    """Base class: a side-input store cannot be filled or followed (a task runtime error,
    so the CLI reports it as one line)."""


class SideInputsConfigError(SideInputsError):
    """The side inputs cannot work as configured (processor class, topics, partitions)."""

    exit_code = USER_ERROR


class SideInputProcessingError(SideInputsError):
    """A side-input record could not be deserialized or processed; names where it is."""


class SideInputsStalledError(SideInputsError):
    """A side-input partition made no progress towards the end it must reach."""


class ReadOnlyStoreError(SideInputsError):
    """A task tried to write to a store that only its side inputs fill."""

    exit_code = USER_ERROR

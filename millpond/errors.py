"""The root of every error millpond raises on purpose: ``except MillpondError`` catches them all.

Each package keeps its own specific classes in its ``errors.py`` (``ConfigError``,
``StoreError``, ``ChangelogError``, ...), all derived from :class:`MillpondError`. An
exception that is not a ``MillpondError`` is a bug in millpond or in the user's task: the
CLI prints a ``MillpondError`` as one line and lets anything else show its traceback.

Each class says which kind of error it is in ``exit_code``, the CLI's exit code for it:
:data:`USER_ERROR` (2) for what the operator must fix before running again (the job's
config, a command's arguments, the task's code at start, a command refused as it cannot
mean or may not do now, a lock another process holds), :data:`RUNTIME_FAILURE` (1) for what
went wrong while working (Kafka unreachable or refusing, a record the job cannot process,
a damaged changelog or checkpoint, a full disk). The root says 1: a class that does not say
otherwise is a runtime failure.
"""

from __future__ import annotations

from typing import ClassVar

USER_ERROR = 2
"""Exit code of a config or user error: fix the config, the command or the code, then rerun."""
RUNTIME_FAILURE = 1
"""Exit code of a runtime failure (and of an unexpected exception, a bug)."""


class MillpondError(Exception):
    """Bad config, input, state or environment, said in one line that names what and where."""

    exit_code: ClassVar[int] = RUNTIME_FAILURE

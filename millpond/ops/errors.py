"""Errors of the operations behind the CLI: status, topics, offline restores."""

from __future__ import annotations

from millpond.errors import RUNTIME_FAILURE, USER_ERROR, MillpondError


class OpsError(MillpondError):
    """Base class for errors of the CLI's back-ends: by default a command that cannot do
    what it was asked here (exit 2)."""

    exit_code = USER_ERROR


class JobNeverRanError(OpsError):
    """``millpond status`` found no checkpoint and no running process of the job."""


class NoLocalStateError(OpsError):
    """A command that reads local stores found no ``job.logged.store.base.dir`` here."""


class TopicCreateError(OpsError):
    """``millpond topics create`` could not create a topic (names it and Kafka's reason);
    the others were made, a result the command reports (exit 1)."""

    exit_code = RUNTIME_FAILURE


class CheckFailedError(OpsError):
    """The check ``millpond run`` runs at start found ACLs the job's principal lacks: the
    message names each; ``lines`` are the check's lines for them, each with the
    ``kafka-acls.sh`` command that grants it. An authorization failure (exit 1), as
    ``millpond check`` reports missing ACLs and as Kafka's own denial is."""

    exit_code = RUNTIME_FAILURE

    def __init__(self, message: str, lines: list[str]) -> None:
        super().__init__(message)
        self.lines = lines

"""Errors of the operations behind the CLI: status, topics, offline restores."""

from __future__ import annotations

from millpond.errors import MillpondError


class OpsError(MillpondError):
    """Base class for errors of the CLI's back-ends."""


class JobNeverRanError(OpsError):
    """``millpond status`` found no checkpoint and no running process of the job."""


class NoLocalStateError(OpsError):
    """A command that reads local stores found no ``job.logged.store.base.dir`` here."""


class TopicCreateError(OpsError):
    """``millpond topics create`` could not create a topic (names it and Kafka's reason)."""


class CheckFailedError(OpsError):
    """The check ``millpond run`` runs at start found ACLs the job's principal lacks: the
    message names each; ``lines`` are the check's lines for them, each with the
    ``kafka-acls.sh`` command that grants it."""

    def __init__(self, message: str, lines: list[str]) -> None:
        super().__init__(message)
        self.lines = lines

"""Errors of the Spark jobs (rebuild, audit, snapshot): one base class, precise subclasses."""

from __future__ import annotations


class SparkJobError(Exception):
    """Base class: a Spark job over changelogs could not do what was asked."""


class SparkUnavailableError(SparkJobError):
    """Spark cannot run here: no Java 17+, or the Kafka connector jars cannot be resolved."""


class SourceError(SparkJobError):
    """A changelog or checkpoint topic cannot be read (missing topic, broker, offsets)."""


class StateDirError(SparkJobError):
    """A local store directory cannot be written (rebuild) or read (audit)."""


class SnapshotError(SparkJobError):
    """The streaming snapshot's output directory is inconsistent or cannot be advanced."""

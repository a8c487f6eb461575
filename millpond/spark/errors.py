"""Errors of the Spark jobs (rebuild, audit, snapshot): one base class, precise subclasses."""

from __future__ import annotations

from millpond.errors import RUNTIME_FAILURE, USER_ERROR, MillpondError


class SparkJobError(MillpondError):
    """Base class: a Spark job over changelogs could not do what was asked (mostly refused:
    bad arguments, a running job, an undrained input; exit 2)."""

    exit_code = USER_ERROR


class SparkUnavailableError(SparkJobError):
    """Spark cannot run here: no Java 17+, or the Kafka connector jars cannot be resolved."""


class SourceError(SparkJobError):
    """A changelog or checkpoint topic cannot be read (missing topic, broker, offsets)."""

    exit_code = RUNTIME_FAILURE


class SourceConfigError(SourceError):
    """The store a command names is not in the job's config, or its changelog system has no
    brokers configured (exit 2)."""

    exit_code = USER_ERROR


class StateDirError(SparkJobError):
    """A local store directory cannot be written (rebuild) or read (audit)."""


class SnapshotError(SparkJobError):
    """The streaming snapshot's output directory is inconsistent or cannot be advanced."""

    exit_code = RUNTIME_FAILURE


class BootstrapError(SparkJobError):
    """Bootstrapping a store was refused (the job has run, live members, duplicate keys) or
    could not complete (a source row that does not serialize, a delivery error)."""


class RescaleError(SparkJobError):
    """Rescaling a job was refused (running, undrained input, inputs not grown, a store not
    partitioned by its input key) or could not complete (a delivery error)."""


class KafkaSettingsError(SparkJobError):
    """The job's Kafka connection settings cannot be given to Spark's (Java) Kafka client:
    a mechanism or setting without a Java counterpart, or a key or certificate file that
    cannot be read."""


class SparkMemoryError(SparkJobError):
    """Spark ran out of memory (a JVM heap, a task result, a Python worker); the message
    names the option to raise."""

    exit_code = RUNTIME_FAILURE

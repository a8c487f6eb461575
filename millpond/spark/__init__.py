"""millpond.spark: rebuild, audit and snapshot store state from changelogs with PySpark.

PySpark is imported only when a job runs, so importing this package stays cheap.
"""

from millpond.spark.audit import AuditReport, PartitionAudit, audit
from millpond.spark.errors import (
    SnapshotError,
    SourceError,
    SparkJobError,
    SparkUnavailableError,
    StateDirError,
)
from millpond.spark.rebuild import PartitionStats, RebuildResult, rebuild
from millpond.spark.session import SparkSettings, get_spark, stop_spark
from millpond.spark.snapshot import (
    SnapshotResult,
    Version,
    current_version,
    read_snapshot,
    snapshot,
)

__all__ = [
    "AuditReport",
    "PartitionAudit",
    "PartitionStats",
    "RebuildResult",
    "SnapshotError",
    "SnapshotResult",
    "SourceError",
    "SparkJobError",
    "SparkSettings",
    "SparkUnavailableError",
    "StateDirError",
    "Version",
    "audit",
    "current_version",
    "get_spark",
    "read_snapshot",
    "rebuild",
    "snapshot",
    "stop_spark",
]

"""millpond.spark: rebuild, audit and snapshot store state from changelogs, and bootstrap
it from batch data, with PySpark.

PySpark is imported only when a job runs, so importing this package stays cheap.
"""

from millpond.spark.audit import AuditReport, PartitionAudit, audit
from millpond.spark.bootstrap import BootstrapResult, bootstrap
from millpond.spark.errors import (
    BootstrapError,
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
    "BootstrapError",
    "BootstrapResult",
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
    "bootstrap",
    "current_version",
    "get_spark",
    "read_snapshot",
    "rebuild",
    "snapshot",
    "stop_spark",
]

"""What the runtime hands a reporter at scrape time: plain snapshots, no exporter types.

The runtime implements :class:`MetricsSource`; a reporter calls :meth:`MetricsSource.sample`
when it is scraped (from its own thread) and turns the samples into its wire format. The
runtime keeps plain int counters it updates per batch or per commit, so taking a sample costs
the scrape, never the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from millpond.metrics.histogram import DurationHistogram


@dataclass
class BackupSample:
    """State backups of one store partition (job.state.backup.uri), from its uploader."""

    uploads: int = 0  # snapshots completed
    failures: int = 0  # uploads (or prunes) that failed
    bytes: int = 0  # bytes stored in the bucket, failed uploads' included
    last_snapshot_time: float | None = None  # unix time the last snapshot was taken
    last_snapshot_offset: int | None = None  # its changelog offset


@dataclass
class StoreSample:
    """One store of one task."""

    store: str
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    changelog_records: int = 0
    changelog_bytes: int = 0
    restore_records: int = 0
    restore_seconds: float = 0.0
    restore_remaining: int = 0  # records left while a restore runs, else 0
    # RocksDB properties (None for in-memory stores): estimated keys, live SST bytes,
    # memtable bytes, read at most once per second by the run loop.
    rocksdb: dict[str, int] | None = None
    backup: BackupSample | None = None  # None when the store is not backed up


@dataclass
class TaskSample:
    """One task (input partition) of this process."""

    task: str  # partition-N
    state: str  # "open" (processing), "opening" (restoring) or "closed" (moved away)
    processed: int = 0
    skipped: int = 0
    commits: int = 0
    commit_seconds: DurationHistogram = field(default_factory=DurationHistogram)
    last_commit_time: float | None = None  # unix time of the last commit
    delivery_errors: int = 0
    lag: dict[str, int] = field(default_factory=dict)  # input topic -> messages behind
    # (input topic, reason) -> records skipped because the task's position there no longer
    # existed (reason "deleted": by retention before being read; "reset_latest": jumped over)
    input_skipped: dict[tuple[str, str], int] = field(default_factory=dict)
    late: dict[str, int] = field(default_factory=dict)  # window operator -> late records
    stores: dict[str, StoreSample] = field(default_factory=dict)


class MetricsSource(Protocol):
    """The runtime's side of a reporter: the job's name and the current samples."""

    job: str

    def sample(self) -> list[TaskSample]:
        """Every task this process holds or held (closed ones keep their counters)."""
        ...

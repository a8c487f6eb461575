"""Where a job's backups stand, read from the bucket alone (no running job needed):
the newest complete snapshot of each store partition, for ``millpond status`` and
``millpond changelog describe``.

An unreachable bucket (or a backup URI whose filesystem cannot be set up) is reported in
every row it concerns, never raised: after the first failure the bucket is not asked again,
so a dead endpoint costs one connection timeout, not one per store partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from millpond.backup.errors import BackupError
from millpond.backup.location import BackupLocation
from millpond.config import Config


@dataclass
class SnapshotStatus:
    """The backups of one store partition (``backup`` in the JSON of both commands)."""

    snapshot: str | None = None  # id of the newest complete snapshot; None: none yet
    offset: int | None = None  # its changelog offset
    time: str | None = None  # when it was taken, ISO 8601 UTC
    bytes: int | None = None  # its files' total size
    snapshots: int = 0  # complete snapshots kept
    behind: int | None = None  # checkpointed changelog offset minus the snapshot's
    error: str | None = None  # why the bucket could not be read

    def short(self) -> str:
        """One table cell: ``@offset time (N behind)``, ``none yet`` or the error."""
        if self.error is not None:
            return f"unreachable ({self.error})"
        if self.snapshot is None or self.offset is None:
            return "none yet"
        when = (self.time or "").replace("T", " ").rstrip("Z")[:19]
        behind = f" ({self.behind} behind)" if self.behind else ""
        return f"@{self.offset} {when}{behind}"


class BackupStatusReader:
    """Reads snapshot summaries of one job's ``job.state.backup.uri``."""

    def __init__(self, config: Config) -> None:
        self.location: BackupLocation | None = None
        self.error: str | None = None
        try:
            self.location = BackupLocation.from_config(config)
        except BackupError as exc:
            self.error = str(exc)

    def status(self, store: str, partition: int, checkpointed: int | None) -> SnapshotStatus:
        """The newest complete snapshot of ``store``'s ``partition``; ``checkpointed`` (the
        task checkpoint's changelog offset, if any) gives ``behind``."""
        if self.location is None or self.error is not None:
            return SnapshotStatus(error=self.error)
        try:
            manifests = self.location.manifests(store, partition)
        except Exception as exc:  # noqa: BLE001 - any fsspec/botocore error: report it
            self.error = f"{self.location.uri}: {type(exc).__name__}: {exc}"
            return SnapshotStatus(error=self.error)
        if not manifests:
            return SnapshotStatus()
        newest = manifests[0]
        when = datetime.fromtimestamp(newest.created_ms / 1000, UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
        return SnapshotStatus(
            newest.id, newest.offset, when, newest.size, len(manifests),
            None if checkpointed is None else checkpointed - newest.offset)

"""State backups: incremental snapshots of RocksDB stores in an object store (issue #18).

The runtime sees one object, :class:`StateBackups`: :meth:`~StateBackups.after_checkpoint`
after a commit's local checkpoint (hands it to the background uploader) and
:meth:`~StateBackups.remote_for` for recovery (a
:class:`millpond.changelog.snapshots.RemoteSnapshots`). Layout and manifests are in
:mod:`.location` and :mod:`.manifest`, the thread in :mod:`.uploader`.
"""

from __future__ import annotations

import atexit
import logging
from pathlib import Path

from millpond.backup.errors import (
    BackupConfigError,
    BackupError,
    BackupUnavailableError,
    SnapshotCorruptError,
)
from millpond.backup.location import BackupLocation
from millpond.backup.manifest import Manifest
from millpond.backup.uploader import BackupUploader
from millpond.changelog.snapshots import RemoteSnapshots
from millpond.config import Config, StoreConfig

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_S = 30.0

__all__ = [
    "BackupError",
    "BackupLocation",
    "BackupUnavailableError",
    "BackupUploader",
    "Manifest",
    "SnapshotCorruptError",
    "StateBackups",
    "state_backups",
]


class StateBackups:
    """A job's backups: which stores are backed up, the uploader, the remote snapshots."""

    def __init__(self, config: Config, *, upload: bool = True) -> None:
        backup = config.backup
        if backup is None:
            raise BackupConfigError("job.state.backup.uri is not set")
        self.config = backup
        self.location = BackupLocation.from_config(config, backup)
        self.uploader: BackupUploader | None = None
        if upload:
            self.uploader = BackupUploader(self.location, backup.interval_ms / 1000.0,
                                           backup.retain)
            atexit.register(self.close)

    @staticmethod
    def covers(store: StoreConfig) -> bool:
        """Whether ``store`` is backed up: persistent, logged, not opted out."""
        return (store.backup_enabled and store.factory != "inmemory"
                and store.changelog is not None)

    def remote_for(self, store: StoreConfig) -> RemoteSnapshots | None:
        """Where recovery may find snapshots of ``store`` (None if it is not backed up)."""
        return self.location if self.covers(store) else None

    def due(self, store: StoreConfig, partition: int) -> bool:
        """Whether a backup of ``store``'s ``partition`` is due (its interval has passed)."""
        return (self.uploader is not None and self.covers(store)
                and self.uploader.due(store.name, partition))

    def after_checkpoint(self, store: StoreConfig, topic: str, partition: int,
                         checkpoint: Path, offset: int) -> None:
        """A commit checkpointed ``store``'s ``partition`` at changelog ``offset`` into
        ``checkpoint``: upload it in the background if it is due."""
        if self.uploader is not None and self.covers(store) and checkpoint.is_dir():
            self.uploader.offer(store.name, topic, partition, checkpoint, offset)

    def close(self, timeout: float = SHUTDOWN_WAIT_S) -> None:
        """Let an upload in flight finish (bounded) and stop the uploader."""
        if self.uploader is not None:
            self.uploader.close(timeout)
            self.uploader = None


def state_backups(config: Config, *, upload: bool = True) -> StateBackups | None:
    """The job's backups, or None when ``job.state.backup.uri`` is unset. A backup URI
    whose filesystem cannot be set up is logged as a warning, and backups stay off."""
    if config.backup is None:
        return None
    try:
        return StateBackups(config, upload=upload)
    except BackupUnavailableError as exc:
        log.warning("state backups are off: %s", exc)
        return None

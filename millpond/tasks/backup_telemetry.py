"""Backup counters for metrics reporters: an :class:`~millpond.backup.uploader.UploadObserver`.

The uploader's thread reports each upload's end here; a reporter's thread reads
:meth:`BackupCounters.sample` when scraped. Counters are per task and store, kept for the
life of the process (like the other counters in :mod:`.telemetry`), so they never go back
when a task moves away and returns.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from millpond.changelog.checkpoint import task_name
from millpond.metrics import BackupSample

if TYPE_CHECKING:
    from millpond.backup.manifest import Manifest


class BackupCounters:
    """Uploads, failures, bytes and the last snapshot per (task, store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: dict[tuple[str, str], BackupSample] = {}

    def _of(self, store: str, partition: int) -> BackupSample:
        return self._samples.setdefault((task_name(partition), store), BackupSample())

    # ---- the uploader's thread ----------------------------------------------------------
    def uploaded(self, store: str, partition: int, manifest: Manifest, sent: int) -> None:
        with self._lock:
            s = self._of(store, partition)
            s.uploads += 1
            s.bytes += sent
            s.last_snapshot_time = manifest.created_ms / 1000.0
            s.last_snapshot_offset = manifest.offset

    def failed(self, store: str, partition: int, error: Exception, sent: int) -> None:
        with self._lock:
            s = self._of(store, partition)
            s.failures += 1
            s.bytes += sent

    # ---- a reporter's thread ------------------------------------------------------------
    def sample(self, task: str, store: str) -> BackupSample:
        """A copy of the counters of ``store`` in ``task`` (zeros before its first upload)."""
        with self._lock:
            found = self._samples.get((task, store))
            return replace(found) if found is not None else BackupSample()

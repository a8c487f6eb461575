"""Uploads checkpoints off the processing thread: at most one in flight per store
partition, at most one started per ``job.state.backup.interval.ms``.

:meth:`BackupUploader.offer` runs on the processing thread right after a commit's local
RocksDB checkpoint: it hard-links the checkpoint's SST files and copies its small files
into a staging directory (``partition-<N>.backup``, beside the store), so the next commit
replacing the checkpoint cannot change what is uploaded, and queues the upload. A failed
upload (object store down, slow, refusing) is logged as a warning; the next offer after
the interval tries again. An :class:`UploadObserver` (metrics) hears of every upload's end.
"""

from __future__ import annotations

import logging
import queue
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from millpond.backup.location import BackupLocation, HashCache
from millpond.backup.manifest import Manifest
from millpond.changelog import local
from millpond.changelog.checkpoint import read_offset_file
from millpond.changelog.errors import CheckpointError

log = logging.getLogger(__name__)

STAGING_SUFFIX = ".backup"


def stage_checkpoint(checkpoint: Path, stage: Path) -> None:
    """A private copy of ``checkpoint`` in the new directory ``stage``: SST files (immutable)
    are hard-linked, the rest copied; with the modes of the store's directory."""
    local.copy_checkpoint(checkpoint, stage)


class UploadObserver(Protocol):
    """Told of each upload's end, on the uploader's thread (keep it cheap, never raise).
    ``sent``: bytes stored by that upload, also when it failed part way."""

    def uploaded(self, store: str, partition: int, manifest: Manifest, sent: int) -> None:
        """A snapshot is complete in the bucket."""
        ...

    def failed(self, store: str, partition: int, error: Exception, sent: int) -> None:
        """An upload (or the prune after it) failed; backups fall behind."""
        ...


@dataclass
class BackupStatus:
    """How one store partition's backups are doing (for logs and metrics)."""

    uploads: int = 0
    failures: int = 0
    last_offset: int | None = None  # changelog offset of the last uploaded snapshot
    last_success: float | None = None  # time.time() of it
    last_error: str | None = None


@dataclass(frozen=True)
class _Job:
    store: str
    topic: str
    partition: int
    offset: int
    stage: Path


class BackupUploader:
    """One background thread uploading staged checkpoints to a :class:`BackupLocation`."""

    def __init__(self, location: BackupLocation, interval_s: float, retain: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.location = location
        self.observers: list[UploadObserver] = []
        self.interval_s = interval_s
        self.retain = retain
        self.clock = clock
        self.status: dict[tuple[str, int], BackupStatus] = {}
        self._lock = threading.Lock()
        self._current: dict[tuple[str, int], _Job] = {}  # the upload in flight
        self._pending: dict[tuple[str, int], _Job] = {}  # the newest staged one after it
        self._started: dict[tuple[str, int], float] = {}
        self._hashes: HashCache = {}
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def due(self, store: str, partition: int) -> bool:
        """Whether an offer of ``store``'s ``partition`` now would be past the interval (a
        commit then takes a fresh local checkpoint to offer)."""
        started = self._started.get((store, partition))
        return started is None or self.clock() - started >= self.interval_s

    def offer(self, store: str, topic: str, partition: int, checkpoint: Path,
              offset: int) -> bool:
        """Stage ``checkpoint`` (changelog ``offset``) for upload if the interval has
        passed since the last one was staged and that offset is not uploaded or queued.
        With an upload of this store partition in flight, it waits as the next one (a
        newer offer replaces it). Returns whether it was staged. Never raises on I/O."""
        key = (store, partition)
        now = self.clock()
        with self._lock:
            started = self._started.get(key)
            if started is not None and now - started < self.interval_s:
                return False
            queued = [j.offset for j in (self._current.get(key), self._pending.get(key)) if j]
            if offset in queued or (not queued and offset == self.status.get(
                    key, BackupStatus()).last_offset):
                return False
            self._started[key] = now
            idle = not queued
        base = checkpoint.name.removesuffix(local.CHECKPOINT_SUFFIX) + STAGING_SUFFIX
        if idle:  # leftovers of a killed process or a failed staging
            for old in checkpoint.parent.glob(base + "-*"):
                local.wipe(old)
        stage: Path | None = None
        problem = None
        try:
            stage = Path(tempfile.mkdtemp(prefix=base + "-", dir=checkpoint.parent))
            stage_checkpoint(checkpoint, stage)
            staged = read_offset_file(stage)
        except (OSError, CheckpointError) as exc:
            problem = f"staging {checkpoint} failed: {exc}"
        else:
            if staged is None or staged.offset != offset:
                # Never label content with an offset it does not reflect: a restore from it
                # would skip the changelog records in between.
                problem = (f"checkpoint {checkpoint} is at changelog offset "
                           f"{None if staged is None else staged.offset}, not {offset}")
        if problem is not None or stage is None:
            log.warning("backup of %s partition %d skipped: %s", store, partition, problem)
            if stage is not None:
                local.wipe(stage)
            with self._lock:
                if started is None:  # nothing was staged: the interval is not used up
                    self._started.pop(key, None)
                else:
                    self._started[key] = started
            return False
        job = _Job(store, topic, partition, offset, stage)
        replaced = None
        with self._lock:
            if key in self._current:
                replaced = self._pending.pop(key, None)
                self._pending[key] = job
            else:
                self._current[key] = job
                self._queue.put(job)
        if replaced is not None:
            local.wipe(replaced.stage)
        self._ensure_thread()
        return True

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="millpond-backup",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            key = (job.store, job.partition)
            try:
                self._upload(job)
            finally:
                local.wipe(job.stage)
                with self._lock:
                    nxt = self._pending.pop(key, None)
                    if nxt is None:
                        self._current.pop(key, None)
                    else:
                        self._current[key] = nxt
                        self._queue.put(nxt)

    def _upload(self, job: _Job) -> None:
        key = (job.store, job.partition)
        status = self.status.setdefault(key, BackupStatus())
        sent = [0]

        def add(n: int) -> None:
            sent[0] += n

        try:
            manifest = self.location.upload(job.stage, store=job.store, topic=job.topic,
                                            partition=job.partition, offset=job.offset,
                                            hashes=self._hashes, sent=add)
            self.location.prune(job.store, job.partition, self.retain, manifest.id)
        except Exception as exc:  # any filesystem error: the job must keep running
            error = exc
            self._tell(lambda o: o.failed(job.store, job.partition, error, sent[0]))
            status.failures += 1
            status.last_error = str(exc) or type(exc).__name__
            behind = (f"the last snapshot is at offset {status.last_offset}"
                      if status.last_offset is not None else "no snapshot uploaded yet")
            log.warning("backup of %s partition %d to %s failed (%s: %s); backups are "
                        "falling behind (%s), retrying after %.0fs", job.store,
                        job.partition, self.location.uri, type(exc).__name__, exc, behind,
                        self.interval_s)
            return
        status.uploads += 1
        status.last_offset = job.offset
        status.last_success = time.time()
        status.last_error = None
        self._tell(lambda o: o.uploaded(job.store, job.partition, manifest, sent[0]))

    def _tell(self, event: Callable[[UploadObserver], None]) -> None:
        for observer in list(self.observers):
            try:
                event(observer)
            except Exception:  # an observer's bug must not stop backups
                log.exception("backup observer %r failed", observer)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no upload is queued or running (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._current:
                    return True
            time.sleep(0.05)
        return False

    def close(self, timeout: float = 30.0) -> None:
        """Let the upload in flight finish (up to ``timeout``) and stop the thread."""
        if self._thread is not None and self._thread.is_alive():
            if not self.wait_idle(timeout):
                log.warning("backup upload still running after %.0fs at shutdown; it is "
                            "abandoned (an incomplete snapshot is never used)", timeout)
            self._queue.put(None)
            self._thread.join(1.0)

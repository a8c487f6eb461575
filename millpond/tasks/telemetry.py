"""The runtime's side of metrics: samples of this process's tasks for a reporter.

The run loop calls :meth:`RuntimeMetrics.refresh` once per iteration; it does work at most
once per second (input lag from the consumer's cached watermarks, no broker round trip, and
each RocksDB store's size properties), so reporters never touch the consumer or RocksDB from
their own thread. Everything else is read at scrape time from the plain counters the tasks
keep anyway (processed per batch, commits per commit, cache and changelog counters per
operation). A task that closes (moved away, or reopened after a failed commit) leaves its
counters here, so they never go back while this process lives. Only created when a
reporter is configured.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import Consumer

from millpond.changelog.checkpoint import task_name
from millpond.metrics import BackupSample, DurationHistogram, StoreSample, TaskSample
from millpond.stores.engines.rocksdb import RocksDbEngine
from millpond.tasks.backup_telemetry import BackupCounters
from millpond.tasks.instance import TaskInstance
from millpond.tasks.opening import TaskOpener

if TYPE_CHECKING:
    from millpond.backup import StateBackups

REFRESH_S = 1.0


class RuntimeMetrics:
    """A :class:`millpond.metrics.MetricsSource` over a container's tasks."""

    def __init__(self, job: str, tasks: dict[int, TaskInstance], inputs: list[str],
                 opener: Callable[[], TaskOpener | None]) -> None:
        self.job = job
        self._tasks = tasks
        self._inputs = inputs
        self._opener = opener
        self._retired: dict[str, TaskSample] = {}
        self._lag: dict[int, dict[str, int]] = {}
        self._rocksdb: dict[tuple[int, str], dict[str, int]] = {}
        self._due = 0.0
        self.backups = BackupCounters()

    def watch_backups(self, backups: StateBackups | None) -> None:
        """Count the uploads of ``backups`` (nothing to do when they are off)."""
        if backups is not None and backups.uploader is not None:
            backups.uploader.observers.append(self.backups)

    # ---- the run loop's thread ----------------------------------------------------------
    def refresh(self, consumer: Consumer, now: float) -> None:
        """Re-read lag and RocksDB properties, at most once per :data:`REFRESH_S`."""
        if now < self._due and self._lag.keys() == self._tasks.keys():
            return  # (a task opened since the last refresh is sampled at once)
        self._due = now + REFRESH_S
        lag: dict[int, dict[str, int]] = {}
        rocksdb: dict[tuple[int, str], dict[str, int]] = {}
        for p, t in list(self._tasks.items()):
            lag[p] = t.lag(consumer, self._inputs)
            for name, s in t.storage.stores.items():
                if isinstance(s.engine, RocksDbEngine):
                    rocksdb[(p, name)] = s.engine.stats()
        self._lag, self._rocksdb = lag, rocksdb

    def retire(self, t: TaskInstance) -> None:
        """``t`` closes: keep its counters (added to the task's next instance here)."""
        closed = self._task_sample(t, "closed")
        earlier = self._retired.get(t.name)
        self._retired[t.name] = _add(earlier, closed) if earlier is not None else closed

    # ---- a reporter's thread ------------------------------------------------------------
    def sample(self) -> list[TaskSample]:
        """Every task open, opening or once held here, counters including closed instances."""
        out: dict[str, TaskSample] = dict(self._retired)
        for t in list(self._tasks.values()):
            live = self._task_sample(t, "open")
            live.lag = dict(self._lag.get(t.partition, {}))
            out[t.name] = _add(out[t.name], live) if t.name in out else live
        opener = self._opener()
        if opener is not None:
            current = opener.opening
            for p in sorted(opener.pending):
                name = task_name(p)
                if p in self._tasks:
                    continue
                opening = TaskSample(name, "opening")
                if p == current:
                    for stats in list(opener.progress.values()):
                        opening.stores[stats.store] = StoreSample(
                            stats.store, restore_records=stats.records,
                            restore_seconds=stats.seconds, restore_remaining=stats.remaining)
                out[name] = _add(out[name], opening) if name in out else opening
        for sample in out.values():  # backed-up stores: the uploader's current counters
            for store in sample.stores.values():
                if store.backup is not None:
                    store.backup = self.backups.sample(sample.task, store.store)
        return sorted(out.values(), key=lambda s: s.task)

    def _task_sample(self, t: TaskInstance, state: str) -> TaskSample:
        m = t.metrics
        hist = DurationHistogram(m.commit_seconds.bounds)
        hist.merge(m.commit_seconds)
        sample = TaskSample(t.name, state, m.processed, m.skipped, m.commits, hist,
                            m.last_commit_time, t.producer.delivery_errors,
                            input_skipped=_merged(m.input_skipped, t.side_inputs.skipped()
                                                  if t.side_inputs is not None else {}),
                            late=dict(getattr(t.task, "late_records", None) or {}))
        for name, s in list(t.storage.stores.items()):
            store = StoreSample(name, rocksdb=self._rocksdb.get((t.partition, name)))
            if s.cache is not None:
                store.cache_hits = s.cache.hits
                store.cache_misses = s.cache.misses
                store.cache_evictions = s.cache.evictions
            if s.logged is not None:
                store.changelog_records = s.logged.writes
                store.changelog_bytes = s.logged.bytes
            if s.recovery is not None:
                store.restore_records = s.recovery.stats.records
                store.restore_seconds = s.recovery.stats.seconds
            if t.storage.backups is not None and t.storage.backups.covers(s.config):
                store.backup = BackupSample()  # filled in by sample()
            sample.stores[name] = store
        return sample


def _merged(a: dict[tuple[str, str], int], b: dict[tuple[str, str], int],
            ) -> dict[tuple[str, str], int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in a.keys() | b.keys()}


def _add(old: TaskSample, new: TaskSample) -> TaskSample:
    """``new`` (a live instance) with the counters of an earlier, closed instance added."""
    hist = DurationHistogram(new.commit_seconds.bounds)
    hist.merge(old.commit_seconds)
    hist.merge(new.commit_seconds)
    out = TaskSample(new.task, new.state, old.processed + new.processed,
                     old.skipped + new.skipped, old.commits + new.commits, hist,
                     new.last_commit_time or old.last_commit_time,
                     old.delivery_errors + new.delivery_errors, new.lag,
                     _merged(old.input_skipped, new.input_skipped),
                     {k: old.late.get(k, 0) + new.late.get(k, 0)
                      for k in old.late.keys() | new.late.keys()})
    for name in sorted(old.stores.keys() | new.stores.keys()):
        a = old.stores.get(name) or StoreSample(name)
        b = new.stores.get(name) or StoreSample(name)
        out.stores[name] = StoreSample(
            name, a.cache_hits + b.cache_hits, a.cache_misses + b.cache_misses,
            a.cache_evictions + b.cache_evictions, a.changelog_records + b.changelog_records,
            a.changelog_bytes + b.changelog_bytes, a.restore_records + b.restore_records,
            b.restore_seconds or a.restore_seconds, b.restore_remaining, b.rocksdb,
            b.backup or a.backup)
    return out

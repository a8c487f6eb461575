"""The Prometheus reporter: ``/metrics`` in Prometheus' text format, via prometheus-client.

A custom collector on a registry of its own (never the global one) turns the runtime's
samples into metric families when Prometheus scrapes; nothing is updated between scrapes,
so the runtime's hot path never touches a prometheus-client object.

The HTTP server is prometheus-client's own (``start_http_server``). :meth:`PrometheusReporter.stop`
wakes its serve loop with a connection: socketserver's ``shutdown()`` otherwise waits for the
loop's next poll (up to half a second at the end of every job, which was most of the
reporter's measured "cost" in the count benchmark).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from millpond.metrics.config import PrometheusConfig
from millpond.metrics.errors import MetricsError
from millpond.metrics.samples import MetricsSource, StoreSample, TaskSample

log = logging.getLogger("millpond.metrics")

STOP_WAIT_S = 5.0  # how long stop() keeps waking the serve loop before giving up on it

TASK = ["job", "task"]
TOPIC = ["job", "task", "topic"]
STORE = ["job", "task", "store"]
ROCKSDB = (("estimate_num_keys", "millpond_rocksdb_estimated_keys",
            "Estimated keys in the store's RocksDB (rocksdb.estimate-num-keys)"),
           ("live_sst_files_size", "millpond_rocksdb_live_sst_bytes",
            "Bytes of the store's live SST files (rocksdb.live-sst-files-size)"),
           ("cur_size_all_mem_tables", "millpond_rocksdb_memtable_bytes",
            "Bytes of the store's memtables (rocksdb.cur-size-all-mem-tables)"))


class JobCollector(Collector):
    """Metric families of one process's tasks, built from ``source`` at each scrape."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source

    def describe(self) -> list[Metric]:
        return []  # nothing to check at registration: the families exist once tasks do

    def collect(self) -> Iterator[Metric]:
        job = self.source.job
        tasks = self.source.sample()
        yield from _task_families(job, tasks)
        stores = [(t, s) for t in tasks for s in t.stores.values()]
        yield from _store_families(job, stores)
        yield from _backup_families(job, [(t, s) for t, s in stores if s.backup is not None])


def _task_families(job: str, tasks: list[TaskSample]) -> Iterator[Metric]:
    def counter(name: str, doc: str, attr: str) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=TASK)
        for t in tasks:
            family.add_metric([job, t.task], getattr(t, attr))
        return family

    yield counter("millpond_messages_processed", "Messages the task processed", "processed")
    yield counter("millpond_messages_skipped", "Messages skipped (bad input the config "
                  "drops or dead-letters)", "skipped")
    skipped = CounterMetricFamily(
        "millpond_input_records_skipped", "Input records the task skipped because its "
        "position no longer existed: reason deleted (removed by retention or DeleteRecords "
        "before the task read them) or reset_latest (still in Kafka, jumped over by "
        "auto.offset.reset=latest)", labels=["job", "task", "topic", "partition", "reason"])
    for t in tasks:
        partition = t.task.rsplit("-", 1)[-1]
        for (topic, reason), n in sorted(t.input_skipped.items()):
            skipped.add_metric([job, t.task, topic, partition, reason], n)
    yield skipped
    late = CounterMetricFamily(
        "millpond_late_records", "Records a dataflow's window operator dropped or sent to its "
        "late_to topic because their windows had closed", labels=["job", "task", "operator"])
    for t in tasks:
        for operator, n in sorted(t.late.items()):
            late.add_metric([job, t.task, operator], n)
    yield late
    yield counter("millpond_commits", "Commits of the task", "commits")
    yield counter("millpond_producer_delivery_errors", "Records Kafka did not accept from "
                  "the task's producer (each stops the commit)", "delivery_errors")
    live = [t for t in tasks if t.state != "closed"]
    lag = GaugeMetricFamily("millpond_consumer_lag", "Messages between the task's next "
                            "offset and the input partition's end", labels=TOPIC)
    for t in live:
        for topic, n in sorted(t.lag.items()):
            lag.add_metric([job, t.task, topic], n)
    yield lag
    hist = HistogramMetricFamily("millpond_commit_duration_seconds",
                                 "Duration of the task's commits", labels=TASK)
    for t in tasks:
        h = t.commit_seconds
        hist.add_metric([job, t.task], h.cumulative(), h.sum)
    yield hist
    last = GaugeMetricFamily("millpond_last_commit_timestamp_seconds",
                             "Unix time of the task's last commit", labels=TASK)
    for t in tasks:
        if t.last_commit_time is not None:
            last.add_metric([job, t.task], t.last_commit_time)
    yield last
    assigned = GaugeMetricFamily("millpond_assigned_tasks", "Tasks assigned to this process "
                                 "(1 per task; state open or opening)",
                                 labels=[*TASK, "state"])
    for t in live:
        assigned.add_metric([job, t.task, t.state], 1)
    yield assigned


def _store_families(job: str, stores: list[tuple[TaskSample, StoreSample]]) -> Iterator[Metric]:
    def family(kind: Any, name: str, doc: str, attr: str, live_only: bool = False) -> Metric:
        f = kind(name, doc, labels=STORE)
        for t, s in stores:
            if not live_only or t.state != "closed":
                f.add_metric([job, t.task, s.store], getattr(s, attr))
        return f

    C, G = CounterMetricFamily, GaugeMetricFamily
    yield family(C, "millpond_changelog_records", "Records sent to the store's changelog",
                 "changelog_records")
    yield family(C, "millpond_changelog_bytes", "Key + value bytes sent to the store's "
                 "changelog", "changelog_bytes")
    yield family(C, "millpond_restore_records", "Changelog records replayed into the store",
                 "restore_records")
    yield family(G, "millpond_restore_duration_seconds", "Seconds the store's last (or "
                 "current) restore took", "restore_seconds")
    yield family(G, "millpond_restore_remaining_records", "Changelog records left to replay "
                 "while the store restores", "restore_remaining", live_only=True)
    yield family(C, "millpond_store_cache_hits", "Object cache hits", "cache_hits")
    yield family(C, "millpond_store_cache_misses", "Object cache misses", "cache_misses")
    yield family(C, "millpond_store_cache_evictions", "Object cache evictions",
                 "cache_evictions")
    for prop, name, doc in ROCKSDB:
        g = GaugeMetricFamily(name, doc, labels=STORE)
        for t, s in stores:
            if s.rocksdb is not None and t.state != "closed" and prop in s.rocksdb:
                g.add_metric([job, t.task, s.store], s.rocksdb[prop])
        yield g


def _backup_families(job: str, stores: list[tuple[TaskSample, StoreSample]]) -> Iterator[Metric]:
    """State backups (job.state.backup.uri) of the backed-up stores; nothing without them."""
    if not stores:
        return
    backups = [(t.task, s.store, s.backup) for t, s in stores if s.backup is not None]
    for kind, name, doc, attr in (
            (CounterMetricFamily, "millpond_backup_uploads", "Snapshots of the store "
             "uploaded to the backup location", "uploads"),
            (CounterMetricFamily, "millpond_backup_upload_failures", "Snapshot uploads (or "
             "the pruning after one) that failed; backups fall behind", "failures"),
            (CounterMetricFamily, "millpond_backup_uploaded_bytes", "Bytes stored in the "
             "backup location (new SST files, small files, manifests)", "bytes"),
            (GaugeMetricFamily, "millpond_backup_last_snapshot_timestamp_seconds", "Unix time "
             "the store's last uploaded snapshot was taken", "last_snapshot_time"),
            (GaugeMetricFamily, "millpond_backup_last_snapshot_offset", "Changelog offset "
             "of the store's last uploaded snapshot", "last_snapshot_offset")):
        family = kind(name, doc, labels=STORE)
        for task, store, b in backups:
            value = getattr(b, attr)
            if value is not None:
                family.add_metric([job, task, store], value)
        yield family


class PrometheusReporter:
    """Serves ``http://host:port/metrics`` from a thread until :meth:`stop`."""

    def __init__(self, config: PrometheusConfig, source: MetricsSource) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(JobCollector(source))
        try:
            self._server, self._thread = start_http_server(
                config.port, addr=config.host, registry=self.registry)
        except OSError as exc:
            raise MetricsError(
                f"cannot serve Prometheus metrics on {config.host}:{config.port}: "
                f"{exc.strerror or exc} (set metrics.reporter.prometheus.port to a free port, "
                "or 0 to pick one)") from exc
        self.host = config.host
        self.port = int(self._server.server_port)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"http://{host}:{self.port}/metrics"
        log.info("metrics: Prometheus metrics at %s", self.url)

    def stop(self) -> None:
        """Stop serving and release the port, at once: a connection wakes the serve loop to
        see the stop request instead of its poll timing out."""
        stopper = threading.Thread(target=self._server.shutdown, daemon=True)
        stopper.start()
        deadline = time.monotonic() + STOP_WAIT_S
        host, port = self._server.server_address[:2]
        address = (str(host), int(port))  # 0.0.0.0 or :: reach this host too
        while stopper.is_alive() and time.monotonic() < deadline:
            try:
                socket.create_connection(address, timeout=0.5).close()
            except OSError:
                pass  # nothing listens any more, or the backlog is full: poll again
            stopper.join(0.01)
        self._server.server_close()
        self._thread.join(timeout=STOP_WAIT_S)

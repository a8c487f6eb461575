"""The metrics package without a broker: config keys, the collector's families and labels,
the HTTP reporter, the histogram, and the cached store's counters."""

from __future__ import annotations

import socketserver
import subprocess
import threading
import urllib.request
import warnings
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.parser import text_string_to_metric_families

from millpond.config import ConfigError, ConfigWarning, load_properties
from millpond.metrics import (
    DurationHistogram,
    MetricsConfigError,
    MetricsError,
    StoreSample,
    TaskSample,
    parse_reporters,
    start_reporters,
)
from millpond.metrics.config import PrometheusConfig
from millpond.metrics.prometheus import JobCollector
from millpond.serdes.builtins import JsonSerde, StringSerde
from millpond.stores import InMemoryEngine
from millpond.stores.cached import CachedStore
from millpond.stores.serialized import SerializedStore
from tests.kafka_util import MILLPOND, REPO, counting_job, write_properties


def props(tmp_path: Path, text: str):  # noqa: ANN201
    path = tmp_path / "job.properties"
    path.write_text(text)
    return load_properties(path)


# ---- config ------------------------------------------------------------------------------
def test_no_reporter_configured(tmp_path: Path) -> None:
    assert parse_reporters(props(tmp_path, "job.name=x\n")) == []
    assert parse_reporters(props(tmp_path, "metrics.reporters=\n")) == []


def test_prometheus_keys(tmp_path: Path) -> None:
    got = parse_reporters(props(tmp_path, "metrics.reporters=prometheus\n"
                                          "metrics.reporter.prometheus.port=0\n"))
    assert got == [PrometheusConfig(0, "127.0.0.1")]
    got = parse_reporters(props(tmp_path, "metrics.reporters = prometheus\n"
                                          "metrics.reporter.prometheus.port=9404\n"
                                          "metrics.reporter.prometheus.host=0.0.0.0\n"))
    assert got == [PrometheusConfig(9404, "0.0.0.0")]


@pytest.mark.parametrize(("text", "where", "says"), [
    ("a=1\nmetrics.reporters=prometheus,jmx\n", "job.properties:2: metrics.reporters:",
     "unknown metrics reporter 'jmx'; known reporters: prometheus"),
    ("metrics.reporters=prometheus\n", "job.properties:1: metrics.reporter.prometheus.port:",
     "is required when metrics.reporters lists prometheus"),
    ("metrics.reporters=prometheus\nmetrics.reporter.prometheus.port=99999\n",
     "job.properties:2: metrics.reporter.prometheus.port:", "must be from 0 to 65535, got 99999"),
    ("metrics.reporters=prometheus\nmetrics.reporter.prometheus.port=abc\n",
     "job.properties:2: metrics.reporter.prometheus.port:", "got 'abc'"),
    ("metrics.reporters=prometheus\nmetrics.reporter.prometheus.port=1\n"
     "metrics.reporter.prometheus.prot=2\n", "job.properties:3: metrics.reporter.prometheus.prot:",
     "did you mean metrics.reporter.prometheus.port?"),
    ("metrics.reporters=prometheus\nmetrics.reporter.prometheus.port=1\n"
     "metrics.reporter.prometheus.host= \n", "job.properties:3: metrics.reporter.prometheus.host:",
     "must not be empty"),
])
def test_config_errors_name_file_line_and_key(tmp_path: Path, text: str, where: str,
                                              says: str) -> None:
    with pytest.raises(MetricsConfigError) as info:
        parse_reporters(props(tmp_path, text))
    message = str(info.value)
    assert message.startswith(str(tmp_path / where)), message
    assert says in message
    assert isinstance(info.value, ConfigError)  # the CLI shows it as one line


def test_keys_of_an_unlisted_reporter_warn(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert parse_reporters(props(tmp_path, "metrics.reporter.prometheus.port=9404\n")) == []
    assert any(issubclass(w.category, ConfigWarning) and "does not list 'prometheus'"
               in str(w.message) and "job.properties:1" in str(w.message) for w in caught)


def test_millpond_run_refuses_a_bad_reporter_before_touching_kafka(tmp_path: Path) -> None:
    # Port 1 of 127.0.0.1 has no broker: the config error must come first, located.
    config = write_properties(tmp_path / "job.properties", {
        **counting_job("127.0.0.1:1", "m", "in", tmp_path / "state"),
        "metrics.reporters": "prometheus,statsd"})
    done = subprocess.run([MILLPOND, "run", "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "job.properties:" in done.stderr and "unknown metrics reporter 'statsd'" in done.stderr
    assert "Traceback" not in done.stderr


# ---- the collector -----------------------------------------------------------------------
class FakeSource:
    job = "jobname"

    def __init__(self, tasks: list[TaskSample]) -> None:
        self.tasks = tasks

    def sample(self) -> list[TaskSample]:
        return self.tasks


def sample_tasks() -> list[TaskSample]:
    hist = DurationHistogram()
    for seconds in (0.003, 0.04, 0.04, 7.0):
        hist.observe(seconds)
    open_task = TaskSample(
        "partition-0", "open", processed=120, skipped=3, commits=4, commit_seconds=hist,
        last_commit_time=1_700_000_000.5, delivery_errors=1,
        lag={"page-views": 7, "clicks": 0},
        input_skipped={("page-views", "deleted"): 40, ("page-views", "reset_latest"): 2},
        late={"views-per-minute": 6},
        stores={"counts": StoreSample("counts", 90, 30, 5, 60, 1234, 500, 0.25, 0,
                                      {"estimate_num_keys": 42, "live_sst_files_size": 4096,
                                       "cur_size_all_mem_tables": 2048})})
    opening = TaskSample("partition-1", "opening", stores={
        "counts": StoreSample("counts", restore_records=100, restore_remaining=900)})
    closed = TaskSample("partition-2", "closed", processed=50, lag={"page-views": 99},
                        stores={"counts": StoreSample("counts", restore_remaining=5)})
    return [open_task, opening, closed]


def scrape(tasks: list[TaskSample]) -> dict[str, list]:  # noqa: ANN201
    registry = CollectorRegistry()
    registry.register(JobCollector(FakeSource(tasks)))
    text = generate_latest(registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


FAMILIES = {
    # family name (as the parser gives it) -> labels every sample carries (besides le)
    "millpond_messages_processed": {"job", "task"},
    "millpond_messages_skipped": {"job", "task"},
    "millpond_input_records_skipped": {"job", "task", "topic", "partition", "reason"},
    "millpond_late_records": {"job", "task", "operator"},
    "millpond_consumer_lag": {"job", "task", "topic"},
    "millpond_commits": {"job", "task"},
    "millpond_commit_duration_seconds": {"job", "task"},
    "millpond_last_commit_timestamp_seconds": {"job", "task"},
    "millpond_changelog_records": {"job", "task", "store"},
    "millpond_changelog_bytes": {"job", "task", "store"},
    "millpond_restore_records": {"job", "task", "store"},
    "millpond_restore_duration_seconds": {"job", "task", "store"},
    "millpond_restore_remaining_records": {"job", "task", "store"},
    "millpond_store_cache_hits": {"job", "task", "store"},
    "millpond_store_cache_misses": {"job", "task", "store"},
    "millpond_store_cache_evictions": {"job", "task", "store"},
    "millpond_rocksdb_estimated_keys": {"job", "task", "store"},
    "millpond_rocksdb_live_sst_bytes": {"job", "task", "store"},
    "millpond_rocksdb_memtable_bytes": {"job", "task", "store"},
    "millpond_producer_delivery_errors": {"job", "task"},
    "millpond_assigned_tasks": {"job", "task", "state"},
}


def test_every_family_with_its_labels() -> None:
    families = scrape(sample_tasks())
    assert set(families) == set(FAMILIES)
    for name, samples in families.items():
        assert samples, name
        for s in samples:
            assert set(s.labels) - {"le"} == FAMILIES[name], (name, s)
            assert s.labels["job"] == "jobname"
            assert s.labels["task"].startswith("partition-")


def value(families: dict, sample_name: str, **labels: str) -> float:
    family = sample_name.removesuffix("_total")
    for suffix in ("_bucket", "_sum", "_count"):
        family = family.removesuffix(suffix)
    found = [s.value for s in families[family] if s.name == sample_name
             and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (sample_name, labels, families[family])
    return float(found[0])


def test_values_and_types() -> None:
    f = scrape(sample_tasks())
    assert value(f, "millpond_messages_processed_total", task="partition-0") == 120
    assert value(f, "millpond_messages_processed_total", task="partition-2") == 50  # closed
    assert value(f, "millpond_messages_skipped_total", task="partition-0") == 3
    assert value(f, "millpond_input_records_skipped_total", task="partition-0",
                 topic="page-views", partition="0", reason="deleted") == 40
    assert value(f, "millpond_input_records_skipped_total", task="partition-0",
                 topic="page-views", partition="0", reason="reset_latest") == 2
    assert value(f, "millpond_late_records_total", task="partition-0",
                 operator="views-per-minute") == 6
    assert value(f, "millpond_consumer_lag", task="partition-0", topic="page-views") == 7
    assert value(f, "millpond_consumer_lag", task="partition-0", topic="clicks") == 0
    # a closed task (moved away) has no lag, no assignment and no restore here any more
    assert not [s for s in f["millpond_consumer_lag"] if s.labels["task"] == "partition-2"]
    assert {s.labels["task"]: s.labels["state"] for s in f["millpond_assigned_tasks"]} == {
        "partition-0": "open", "partition-1": "opening"}
    assert value(f, "millpond_commits_total", task="partition-0") == 4
    assert value(f, "millpond_commit_duration_seconds_count", task="partition-0") == 4
    assert value(f, "millpond_commit_duration_seconds_sum", task="partition-0") == pytest.approx(
        7.083)
    assert value(f, "millpond_commit_duration_seconds_bucket", task="partition-0",
                 le="0.005") == 1
    assert value(f, "millpond_commit_duration_seconds_bucket", task="partition-0",
                 le="0.05") == 3
    assert value(f, "millpond_commit_duration_seconds_bucket", task="partition-0",
                 le="+Inf") == 4
    assert value(f, "millpond_last_commit_timestamp_seconds", task="partition-0") == 1.7e9 + 0.5
    assert value(f, "millpond_changelog_records_total", task="partition-0") == 60
    assert value(f, "millpond_changelog_bytes_total", task="partition-0") == 1234
    assert value(f, "millpond_restore_records_total", task="partition-1") == 100
    assert value(f, "millpond_restore_remaining_records", task="partition-1") == 900
    assert value(f, "millpond_restore_duration_seconds", task="partition-0") == 0.25
    assert value(f, "millpond_store_cache_hits_total", task="partition-0") == 90
    assert value(f, "millpond_store_cache_misses_total", task="partition-0") == 30
    assert value(f, "millpond_store_cache_evictions_total", task="partition-0") == 5
    assert value(f, "millpond_rocksdb_estimated_keys", task="partition-0") == 42
    assert value(f, "millpond_rocksdb_live_sst_bytes", task="partition-0") == 4096
    assert value(f, "millpond_rocksdb_memtable_bytes", task="partition-0") == 2048
    assert value(f, "millpond_producer_delivery_errors_total", task="partition-0") == 1


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    h = DurationHistogram((0.1, 1.0))
    for s in (0.1, 0.5, 1.0, 3.0):
        h.observe(s)
    assert h.cumulative() == [("0.1", 1), ("1.0", 3), ("+Inf", 4)]
    assert (h.count, h.sum) == (4, pytest.approx(4.6))


# ---- the HTTP reporter ---------------------------------------------------------------------
def test_reporter_serves_and_releases_its_port(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="millpond.metrics")
    [reporter] = start_reporters([PrometheusConfig(0)], FakeSource(sample_tasks()))
    try:
        assert reporter.url.startswith("http://127.0.0.1:") and reporter.url.endswith("/metrics")
        assert f"Prometheus metrics at {reporter.url}" in caplog.text
        with urllib.request.urlopen(reporter.url, timeout=10) as response:
            body = response.read().decode()
        assert 'millpond_messages_processed_total{job="jobname",task="partition-0"} 120.0' in body
        # its own registry: none of the client library's default process/python collectors
        assert "python_gc_objects_collected_total" not in body
        port = int(reporter.url.rsplit(":", 1)[1].split("/")[0])
        with pytest.raises(MetricsError, match=f"cannot serve Prometheus metrics on "
                                               f"127.0.0.1:{port}"):
            start_reporters([PrometheusConfig(port)], FakeSource([]))
    finally:
        reporter.stop()
    [again] = start_reporters([PrometheusConfig(port)], FakeSource([]))  # released: a
    again.stop()  # restarted process can take the same port


def test_stop_wakes_the_serve_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """stop() does not wait for the serve loop's poll: with an hour-long poll it still stops
    the thread and frees the port (a slow stop was added to every job's end)."""
    serve = socketserver.BaseServer.serve_forever
    monkeypatch.setattr(ThreadingWSGIServer, "serve_forever",
                        lambda self, poll_interval=0.5: serve(self, 3600.0))
    [reporter] = start_reporters([PrometheusConfig(0)], FakeSource(sample_tasks()))
    with urllib.request.urlopen(reporter.url, timeout=10) as response:
        assert response.status == 200
    stopping = threading.Thread(target=reporter.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=30)  # bounded: without the wake-up, stop() would wait an hour
    assert not stopping.is_alive(), "stop() waited for the serve loop's poll"
    assert not reporter._thread.is_alive()
    port = int(reporter.url.rsplit(":", 1)[1].split("/")[0])
    [again] = start_reporters([PrometheusConfig(port)], FakeSource([]))
    again.stop()


# ---- the cached store's counters -----------------------------------------------------------
def test_cache_counts_hits_misses_and_evictions() -> None:
    inner = SerializedStore(InMemoryEngine(), StringSerde(), JsonSerde(), "s")
    store = CachedStore(inner, "s", cache_size=2)
    store.put("a", 1)
    assert store.get("a") == 1  # hit
    assert store.get("b") is None  # miss (cached as absent)
    assert store.get("b") is None  # hit
    store.put("c", 3)  # third entry: evicts the least recently used ("a")
    assert (store.hits, store.misses, store.evictions) == (2, 1, 1)
    assert store.get_all(["a", "b", "c"]) == {"a": 1, "c": 3}  # a: miss; b, c: hits
    assert (store.hits, store.misses) == (4, 2)
    assert store.evictions >= 2


# ---- the runtime's source: a task being opened reports its restore live -----------------
def test_opening_task_reports_restore_progress() -> None:
    import time

    from millpond.changelog.restore import RestoreStats
    from millpond.tasks.opening import TaskOpener
    from millpond.tasks.telemetry import RuntimeMetrics

    def steps(partition: int):  # noqa: ANN202 - an opening generator, one batch per step
        stats = RestoreStats("counts", "cl", partition, 100, 1100, position=100)
        yield None
        stats.records, stats.position = 400, 500
        time.sleep(0.05)  # the opener's time budget ends inside this batch
        yield stats
        stats.records, stats.position = 1000, 1100
        time.sleep(0.05)
        yield stats
        raise RuntimeError("not reached in this test")

    opener = TaskOpener(steps, hold_s=0.0)
    source = RuntimeMetrics("j", {}, ["in"], lambda: opener)
    opener.add(3)
    opener.add(5)
    assert opener.step(0.01) == []
    tasks = {t.task: t for t in source.sample()}
    assert {t: s.state for t, s in tasks.items()} == {"partition-3": "opening",
                                                      "partition-5": "opening"}
    store = tasks["partition-3"].stores["counts"]
    assert (store.restore_records, store.restore_remaining) == (400, 600)
    assert tasks["partition-5"].stores == {}  # queued behind partition 3: nothing yet
    opener.step(0.01)
    store = source.sample()[0].stores["counts"]
    assert (store.restore_records, store.restore_remaining) == (1000, 0)
    opener.close()


def test_counters_of_closed_instances_are_kept_and_added() -> None:
    from types import SimpleNamespace

    from millpond.tasks.instance import TaskInstance
    from millpond.tasks.storage import TaskStorage
    from millpond.tasks.telemetry import RuntimeMetrics

    def instance(processed: int, commit_s: float) -> TaskInstance:
        t = TaskInstance(1, None, TaskStorage(1), SimpleNamespace(delivery_errors=1),  # type: ignore[arg-type]
                         None, {"in": 0})  # type: ignore[arg-type]
        t.metrics.processed = processed
        t.metrics.commits = 1
        t.metrics.commit_seconds.observe(commit_s)
        return t

    tasks: dict[int, TaskInstance] = {}
    source = RuntimeMetrics("j", tasks, ["in"], lambda: None)
    source.retire(instance(10, 0.01))  # opened, processed 10, closed (e.g. a failed commit)
    source.retire(instance(5, 0.2))  # reopened, processed 5, moved away
    [closed] = source.sample()
    assert (closed.task, closed.state, closed.processed, closed.commits) == (
        "partition-1", "closed", 15, 2)
    assert closed.delivery_errors == 2 and closed.commit_seconds.count == 2
    tasks[1] = instance(7, 0.02)  # back here: the counters go on from 15, never back
    [live] = source.sample()
    assert (live.state, live.processed, live.commits, live.commit_seconds.count) == (
        "open", 22, 3, 3)


def test_backup_families_only_for_backed_up_stores() -> None:
    """The uploader's observer counts per task and store; families appear only for stores
    with backups, gauges once a snapshot is uploaded."""
    from millpond.backup.manifest import Manifest
    from millpond.tasks.backup_telemetry import BackupCounters

    counters = BackupCounters()
    snapshot = Manifest("s1", "job-1", "counts", "job-counts-changelog", 0, 41, "partition-0",
                        1_700_000_000_250, [])
    counters.uploaded("counts", 0, snapshot, 5000)
    counters.uploaded("counts", 0, snapshot, 300)
    counters.failed("counts", 1, OSError("bucket down"), 700)
    tasks = [TaskSample(f"partition-{p}", "open", stores={
        "counts": StoreSample("counts", backup=counters.sample(f"partition-{p}", "counts")),
        "plain": StoreSample("plain")}) for p in range(3)]
    f = scrape(tasks)
    assert value(f, "millpond_backup_uploads_total", task="partition-0") == 2
    assert value(f, "millpond_backup_uploaded_bytes_total", task="partition-0") == 5300
    assert value(f, "millpond_backup_last_snapshot_offset", task="partition-0") == 41
    assert value(f, "millpond_backup_last_snapshot_timestamp_seconds",
                 task="partition-0") == 1_700_000_000.25
    assert value(f, "millpond_backup_upload_failures_total", task="partition-1") == 1
    assert value(f, "millpond_backup_uploaded_bytes_total", task="partition-1") == 700
    assert value(f, "millpond_backup_uploads_total", task="partition-2") == 0
    for name in ("millpond_backup_last_snapshot_offset",
                 "millpond_backup_last_snapshot_timestamp_seconds"):
        assert {s.labels["task"] for s in f[name]} == {"partition-0"}, name
    assert {s.labels["store"] for n, samples in f.items() if n.startswith("millpond_backup")
            for s in samples} == {"counts"}
    assert not [n for n in scrape(sample_tasks()) if n.startswith("millpond_backup")]

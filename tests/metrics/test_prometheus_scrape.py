"""A running job scraped by a real Prometheus server, queried through Prometheus' HTTP API.

A counting job with ``metrics.reporters=prometheus`` on port 0 (the port is read from the
job's log line) processes a known input; Debian's ``prometheus`` binary scrapes it every
second. Prometheus must then report ``sum(millpond_messages_processed_total)`` equal to the
messages produced and every task's ``millpond_consumer_lag`` at 0, hold every family with its
labels (the job backs its store up to a ``file://`` directory, for the backup families), and
answer every PromQL query of the Grafana dashboard (docker/grafana) with data.
Without the binary the test skips outside CI and fails in CI (.ci/run installs it).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from millpond.dev.kafka import free_port
from tests.conftest import installed
from tests.kafka_util import (
    REPO,
    counting_job,
    create_topic,
    produce_users,
    start_job,
    stop_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

DASHBOARD = REPO / "docker" / "grafana" / "dashboards" / "millpond.json"
PARTITIONS, MESSAGES, USERS = 4, 6000, 300
URL_LINE = re.compile(r"Prometheus metrics at (http://\S+/metrics)")
# Every family the reporter serves (as Prometheus stores them) and the labels each carries.
FAMILIES = {
    "millpond_messages_processed_total": {"job", "task"},
    "millpond_messages_skipped_total": {"job", "task"},
    "millpond_consumer_lag": {"job", "task", "topic"},
    "millpond_commits_total": {"job", "task"},
    "millpond_commit_duration_seconds_bucket": {"job", "task", "le"},
    "millpond_last_commit_timestamp_seconds": {"job", "task"},
    "millpond_changelog_records_total": {"job", "task", "store"},
    "millpond_changelog_bytes_total": {"job", "task", "store"},
    "millpond_restore_records_total": {"job", "task", "store"},
    "millpond_restore_duration_seconds": {"job", "task", "store"},
    "millpond_restore_remaining_records": {"job", "task", "store"},
    "millpond_store_cache_hits_total": {"job", "task", "store"},
    "millpond_store_cache_misses_total": {"job", "task", "store"},
    "millpond_store_cache_evictions_total": {"job", "task", "store"},
    "millpond_rocksdb_estimated_keys": {"job", "task", "store"},
    "millpond_rocksdb_live_sst_bytes": {"job", "task", "store"},
    "millpond_rocksdb_memtable_bytes": {"job", "task", "store"},
    "millpond_producer_delivery_errors_total": {"job", "task"},
    "millpond_assigned_tasks": {"job", "task", "state"},
    # job.state.backup.uri (a file:// directory here; tests/backup scrapes them with S3)
    "millpond_backup_uploads_total": {"job", "task", "store"},
    "millpond_backup_upload_failures_total": {"job", "task", "store"},
    "millpond_backup_uploaded_bytes_total": {"job", "task", "store"},
    "millpond_backup_last_snapshot_timestamp_seconds": {"job", "task", "store"},
    "millpond_backup_last_snapshot_offset": {"job", "task", "store"},
}


def prometheus_binary() -> str:
    return installed("prometheus", "Debian: apt-get install prometheus; .ci/run installs it")


class Lines:
    """A process's output read by a thread (the pipe never fills), searchable with a wait."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.proc = proc
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = pattern.search(self.text())
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{pattern.pattern!r} not seen:\n{self.text()[-3000:]}")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[str]]]:
    """Starts a real Prometheus scraping a target every second; killed in the end."""
    binary = prometheus_binary()
    started: list[subprocess.Popen[str]] = []

    def start(target: str) -> subprocess.Popen[str]:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: millpond\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        port = free_port()
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
             "--storage.tsdb.retention.time=1h"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        started.append(proc)
        proc.api = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{proc.api}/-/ready", timeout=2) as r:  # type: ignore[attr-defined]
                    if r.status == 200:
                        return proc
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read() if proc.poll() is not None and proc.stdout else ""
                raise AssertionError(f"prometheus did not get ready on port {port}: {out}")
            time.sleep(0.2)

    try:
        yield start
    finally:
        for proc in started:
            proc.kill()
            proc.wait(timeout=10)


def query(api: str, promql: str) -> list[dict[str, Any]]:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{promql}: {exc} {exc.read().decode()}") from None
    assert body["status"] == "success", (promql, body)
    return body["data"]["result"]  # type: ignore[no-any-return]


def scalar(api: str, promql: str) -> float | None:
    result = query(api, promql)
    return float(result[0]["value"][1]) if result else None


def wait_until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def dashboard_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in doc["panels"]
            for target in panel["targets"]]


def test_prometheus_scrapes_a_job(kafka_bootstrap: str, topic_name: Callable[[str], str],
                                  tmp_path: Path, prometheus: Callable[[str], Any]) -> None:
    topic = topic_name("in")
    name = topic_name("job")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    half = MESSAGES // 2  # the second half while Prometheus scrapes: rates are not all 0
    produce_users(kafka_bootstrap, topic, half, USERS, PARTITIONS)
    config = write_properties(tmp_path / "job.properties", {
        **counting_job(kafka_bootstrap, name, topic, tmp_path / "state"),
        "metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": 0,
        "job.state.backup.uri": f"file://{tmp_path / 'backups'}"})
    job = start_job(config)
    try:
        out = Lines(job)
        url = out.wait_for(URL_LINE, timeout=60).group(1)
        target = urllib.parse.urlsplit(url).netloc
        assert target.startswith("127.0.0.1:") and not target.endswith(":0")
        server = prometheus(target)
        wait_until("the first half processed and scraped",
                   lambda: scalar(server.api, "sum(millpond_messages_processed_total)") == half,
                   timeout=45)
        produce_users(kafka_bootstrap, topic, MESSAGES - half, USERS, PARTITIONS)

        # Every message produced is counted once, and every task catches up to lag 0.
        wait_until("sum(millpond_messages_processed_total) == messages produced",
                   lambda: scalar(server.api, "sum(millpond_messages_processed_total)")
                   == MESSAGES, timeout=45)
        wait_until("every task's lag 0", lambda: (
            scalar(server.api, "count(millpond_consumer_lag)") == PARTITIONS
            and scalar(server.api, "max(millpond_consumer_lag)") == 0), timeout=20)
        lag = query(server.api, "millpond_consumer_lag")
        assert {(r["metric"]["job"], r["metric"]["topic"]) for r in lag} == {(name, topic)}
        assert {r["metric"]["task"] for r in lag} == {f"partition-{p}" for p in range(PARTITIONS)}
        assert scalar(server.api, "sum(millpond_assigned_tasks)") == PARTITIONS
        assert scalar(server.api, "sum(millpond_commits_total)") >= PARTITIONS
        assert scalar(server.api, "sum(millpond_changelog_records_total)") >= USERS
        assert scalar(server.api, "sum(millpond_store_cache_misses_total)") == USERS
        assert scalar(server.api, "sum(millpond_store_cache_hits_total)") == MESSAGES - USERS
        assert scalar(server.api, "sum(millpond_producer_delivery_errors_total)") == 0

        # Every family reached Prometheus, each series with exactly its labels (the scrape
        # adds `instance`; honor_labels keeps millpond's `job`).
        for family, labels in FAMILIES.items():
            series = query(server.api, family)
            assert series, family
            for s in series:
                assert set(s["metric"]) - {"__name__", "instance"} == labels, (family, s)
                assert s["metric"]["job"] == name

        # Every query of the Grafana dashboard answers with data (its variables filled in
        # as Grafana would: the job, and a rate window covering the run).
        wait_until("a few scrapes", lambda: (scalar(
            server.api, "count_over_time(up[1m])") or 0) >= 5, timeout=10)
        panels = dashboard_queries()
        assert len(panels) >= 10
        for title, expr in panels:
            promql = expr.replace("$job", name).replace("$__rate_interval", "1m")
            result = query(server.api, promql)
            assert result, f"dashboard panel {title!r}: no data for {promql}"
            values = [float(r["value"][1]) for r in result]
            assert any(not math.isnan(v) for v in values), (title, promql, result)

        # The log's status line (every 10 s) shows the rate and the total lag, 0 by now.
        out.wait_for(re.compile(r"status: [\d,]+ msg/s, lag 0 msgs, 4 tasks \[0, 1, 2, 3\]"),
                     timeout=15)
    finally:
        stop_job(job)
    log = out.text()
    assert job.returncode == 0, log[-3000:]
    assert "Traceback" not in log

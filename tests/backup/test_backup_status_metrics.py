"""A job backing up to a real S3 server (S3Proxy) reports its uploads on /metrics, and
``millpond status`` / ``changelog describe`` show the newest snapshot from the bucket alone
(the job stopped), or say the bucket is unreachable without failing.

``job.state.backup.interval.ms`` is 10 minutes, so each task partition uploads exactly one
snapshot during the test (its first commit's): the scraped counters and gauges must then
match the bucket's one manifest per partition exactly.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from millpond.backup import BackupLocation
from millpond.config import Config
from millpond.dev.kafka import free_port
from millpond.ops.offline import Job
from tests.kafka_util import (
    counting_job,
    create_topic,
    millpond,
    produce_users,
    start_job,
    stop_job,
    write_properties,
)
from tests.metrics.scrape import scrape_until
from tests.metrics.test_prometheus_scrape import URL_LINE, Lines

pytestmark = pytest.mark.kafka

PARTITIONS, MESSAGES, USERS = 2, 2000, 100
BACKUP_FAMILIES = ("millpond_backup_uploads_total", "millpond_backup_upload_failures_total",
                   "millpond_backup_uploaded_bytes_total",
                   "millpond_backup_last_snapshot_timestamp_seconds",
                   "millpond_backup_last_snapshot_offset")


def _by_task(metrics: dict[str, dict[tuple[tuple[str, str], ...], float]], family: str,
             ) -> dict[str, float]:
    out = {}
    for labels, value in metrics.get(family, {}).items():
        d = dict(labels)
        assert d.keys() == {"job", "task", "store"} and d["store"] == "counts", (family, d)
        out[d["task"]] = value
    return out


def test_backup_metrics_and_status(kafka_bootstrap: str, topic_name: Callable[[str], str],
                                   tmp_path: Path, s3: Any) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, PARTITIONS)
    produce_users(kafka_bootstrap, source, MESSAGES, USERS, PARTITIONS)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state",
                         **{"job.state.backup.interval.ms": 600_000,
                            "metrics.reporters": "prometheus",
                            "metrics.reporter.prometheus.port": 0, **s3.properties(name)})
    config = write_properties(tmp_path / "job.properties", props)
    loc = BackupLocation.from_config(Config.load(config))
    tasks = {f"partition-{p}" for p in range(PARTITIONS)}

    job = start_job(config)
    try:
        out = Lines(job)
        url = out.wait_for(URL_LINE, timeout=60).group(1)
        metrics = scrape_until(  # one snapshot per task partition, scraped
            url, lambda m: _by_task(m, "millpond_backup_last_snapshot_offset").keys() == tasks,
            job, out.text)
    finally:
        stop_job(job)
    assert job.returncode == 0, out.text()[-3000:]

    # /metrics agrees with the bucket: one upload each, its offset and time, no failure
    snaps = {f"partition-{p}": loc.manifests("counts", p) for p in range(PARTITIONS)}
    assert {t: len(ms) for t, ms in snaps.items()} == dict.fromkeys(tasks, 1), snaps
    newest = {t: ms[0] for t, ms in snaps.items()}
    for family in BACKUP_FAMILIES:
        assert _by_task(metrics, family).keys() == tasks, family
    assert _by_task(metrics, "millpond_backup_uploads_total") == dict.fromkeys(tasks, 1.0)
    assert _by_task(metrics, "millpond_backup_upload_failures_total") == dict.fromkeys(tasks, 0)
    assert _by_task(metrics, "millpond_backup_last_snapshot_offset") == {
        t: float(m.offset) for t, m in newest.items()}
    assert _by_task(metrics, "millpond_backup_last_snapshot_timestamp_seconds") == {
        t: m.created_ms / 1000 for t, m in newest.items()}
    sent = _by_task(metrics, "millpond_backup_uploaded_bytes_total")
    # the first snapshot stores every file, and its manifest besides
    assert all(sent[t] > m.size for t, m in newest.items()), (sent, newest)

    # status, job stopped: the bucket's newest snapshot and how far the checkpoint is past it
    checkpoints = Job(Config.load(config)).checkpoints()
    doc = json.loads(_ok(millpond("status", "--config", str(config), "--format", "json")))
    for row in doc["partitions"]:
        [store] = row["stores"]
        m = newest[row["task"]]
        checkpointed = checkpoints[row["task"]].changelogs["counts"]
        assert store["backup"] == {
            "snapshot": m.id, "offset": m.offset, "bytes": m.size, "snapshots": 1,
            "time": store["backup"]["time"], "behind": checkpointed - m.offset,
            "error": None}, store
        assert store["backup"]["time"].startswith(
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(m.created_ms // 1000)))
    table = _ok(millpond("status", "--config", str(config)))
    for m in newest.values():
        assert f", backup @{m.offset} " in table, table

    described = json.loads(_ok(millpond("changelog", "describe", "--config", str(config),
                                        "--format", "json")))
    assert {(r["partition"], r["backup"]["snapshot"]) for r in described["partitions"]} == {
        (p, newest[f"partition-{p}"].id) for p in range(PARTITIONS)}

    # the bucket unreachable: said in the backup column, the rest as before, exit 0
    dead = ("--config-override", "job.state.backup.options.client_kwargs.endpoint_url="
            f"http://127.0.0.1:{free_port()}")
    began = time.monotonic()
    doc = json.loads(_ok(millpond("status", "--config", str(config), *dead, "--format", "json")))
    assert time.monotonic() - began < 60
    for row in doc["partitions"]:
        backup = row["stores"][0]["backup"]
        assert backup["snapshot"] is None and "127.0.0.1" in backup["error"], backup
        assert row["checkpoint"] is not None
    table = _ok(millpond("changelog", "describe", "--config", str(config), *dead))
    assert table.count("unreachable (") == PARTITIONS, table


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout

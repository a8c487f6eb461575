"""A job's own /metrics after a restore from the changelog (the store directory lost).

The job counts its input once (bounded, no reporter); its state directory is deleted; the
restarted job, with the reporter on port 0, restores every store from its changelog. Its
/metrics (scraped directly, parsed by prometheus-client's parser) must count every changelog
record replayed, report the restore finished (0 remaining, a duration), the restored RocksDB
keys, four open tasks, no lag and nothing processed.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import (
    counting_job,
    create_topic,
    produce_users,
    read_topic,
    run_job,
    start_job,
    stop_job,
    write_properties,
)
from tests.metrics.scrape import scrape_until, total
from tests.metrics.test_prometheus_scrape import URL_LINE, Lines

pytestmark = pytest.mark.kafka

PARTITIONS, MESSAGES, USERS = 4, 3000, 200


def test_restore_is_counted(kafka_bootstrap: str, topic_name: Callable[[str], str],
                            tmp_path: Path) -> None:
    topic, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    produce_users(kafka_bootstrap, topic, MESSAGES, USERS, PARTITIONS)
    state = tmp_path / "state"
    props = counting_job(kafka_bootstrap, name, topic, state)
    first = run_job(write_properties(tmp_path / "first.properties", props), "--bounded")
    assert first.returncode == 0, first.stderr[-3000:]
    changelog = [m for m in read_topic(kafka_bootstrap, f"{name}-counts-changelog")
                 if m.value() is not None]
    assert len(changelog) >= USERS
    shutil.rmtree(state)  # a lost disk: every task restores its store from the changelog

    job = start_job(write_properties(tmp_path / "second.properties", {
        **props, "metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": 0}))
    try:
        out = Lines(job)
        url = out.wait_for(URL_LINE, timeout=60).group(1)
        deadline = time.monotonic() + 60
        while out.text().count(" ready: restored ") < PARTITIONS:
            assert time.monotonic() < deadline and job.poll() is None, out.text()[-3000:]
            time.sleep(0.2)
        metrics = scrape_until(  # lag and RocksDB properties are refreshed once per second
            url, lambda m: (len(m.get("millpond_consumer_lag", {})) == PARTITIONS
                            and len(m.get("millpond_rocksdb_estimated_keys", {})) == PARTITIONS),
            job, out.text, timeout=20)
    finally:
        stop_job(job)
    assert job.returncode == 0, out.text()[-3000:]

    assert total(metrics, "millpond_restore_records_total") == len(changelog)
    assert total(metrics, "millpond_restore_remaining_records") == 0
    durations = metrics["millpond_restore_duration_seconds"]
    assert len(durations) == PARTITIONS and all(v > 0 for v in durations.values())
    assert total(metrics, "millpond_rocksdb_estimated_keys") >= USERS
    assert total(metrics, "millpond_rocksdb_live_sst_bytes") > 0
    assert total(metrics, "millpond_assigned_tasks") == PARTITIONS
    assert {dict(k)["state"] for k in metrics["millpond_assigned_tasks"]} == {"open"}
    assert total(metrics, "millpond_consumer_lag") == 0
    assert total(metrics, "millpond_messages_processed_total") == 0  # all of it was committed
    for labels in metrics["millpond_restore_records_total"]:
        assert dict(labels).keys() == {"job", "task", "store"} and dict(labels)["store"] == "counts"

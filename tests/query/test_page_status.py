"""The page's files and /status on a real endpoint (no Kafka): the files come from the
package, a task's restore progress and commit age are computed from its sample, and Kafka
away still answers this process's own status with the error."""

from __future__ import annotations

import json
import urllib.request
from types import SimpleNamespace

from millpond.metrics import BackupSample, StoreSample, TaskSample
from millpond.query import Mailbox, QueryServer
from millpond.query.page import FILES, StatusPage, is_public, task_json


def source(samples: list[TaskSample]) -> SimpleNamespace:
    """A metrics source of fixed samples (as the runtime's RuntimeMetrics answers)."""
    return SimpleNamespace(job="page-test", sample=lambda: samples)


def restoring() -> TaskSample:
    sample = TaskSample("partition-3", "opening")
    sample.stores["counts"] = StoreSample("counts", restore_records=750, restore_remaining=250)
    return sample


def test_task_rows_carry_restore_progress_commit_age_and_backups() -> None:
    row = task_json(restoring(), now=100.0)
    assert (row["partition"], row["state"], row["commit_age_s"]) == (3, "opening", None)
    assert row["stores"][0]["restore_fraction"] == 0.75
    done = TaskSample("partition-0", "open", processed=9, last_commit_time=98.5,
                      lag={"in": 4, "side": 1})
    done.stores["counts"] = StoreSample("counts", backup=BackupSample(
        uploads=2, last_snapshot_time=90.0, last_snapshot_offset=41))
    row = task_json(done, now=100.0)
    assert (row["commit_age_s"], row["lag_total"], row["processed"]) == (1.5, 5, 9)
    assert row["stores"][0]["restore_fraction"] is None
    assert row["stores"][0]["backup"]["last_snapshot_offset"] == 41


def test_the_endpoint_serves_the_page_and_status_without_kafka() -> None:
    def kafka_away() -> dict[str, object]:
        raise ConnectionError("no broker")

    server = QueryServer("127.0.0.1", 0, {}, Mailbox())
    server.page = StatusPage("page-test", server.url, source([restoring()]), kafka_away, None)
    server.start()
    try:
        for path, (name, content_type) in FILES.items():
            with urllib.request.urlopen(server.url + path, timeout=10) as resp:
                body = resp.read()
                assert resp.headers["Content-Type"] == content_type
            assert body and is_public(path), name
        assert b"/static/page.js" in urllib.request.urlopen(server.url + "/", timeout=10).read()
        with urllib.request.urlopen(server.url + "/status", timeout=10) as resp:
            status = json.loads(resp.read())
        assert status["kafka"] == {"error": "ConnectionError: no broker"}
        [process] = status["processes"]
        assert process["url"] == server.url and process["tasks"][0]["task"] == "partition-3"
        assert not is_public("/status") and not is_public("/stores")
    finally:
        server.stop()


def test_the_kafka_view_is_shared_until_it_is_stale() -> None:
    calls: list[int] = []

    def job_status() -> dict[str, object]:
        calls.append(1)
        return {"group": "g", "partitions": [{"partition": 0, "owner": {
            "client_id": "g@vm[query=http://127.0.0.1:1]:7", "host": "/127.0.0.1"}}]}

    page = StatusPage("page-test", "http://127.0.0.1:1", source([]), job_status, None,
                      ttl_s=60)
    first, second = page.job_view(), page.job_view()
    assert len(calls) == 1 and first["kafka"] is second["kafka"]
    assert first["kafka"]["partitions"][0]["owner_url"] == "http://127.0.0.1:1"
    assert [p["url"] for p in first["processes"]] == ["http://127.0.0.1:1"]
    assert isinstance(second["kafka_age_s"], float)

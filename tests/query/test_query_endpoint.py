"""The query endpoint of a running job on the real broker: the values the job holds now,
pages that cover a partition once, 503 for a partition held elsewhere or restoring."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    start_job,
    write_properties,
)
from tests.query.helpers import (
    endpoint,
    expected_by_partition,
    get,
    query_job,
    stop,
    wait_for_counts,
)
from tests.query.processes import scan_pages

pytestmark = pytest.mark.kafka

def test_queries_answer_what_the_running_job_holds(kafka_bootstrap: str, tmp_path: Path) -> None:
    name, config = query_job(kafka_bootstrap, tmp_path, "query", 2, **{"task.commit.ms": 60000})
    proc = start_job(config)
    try:
        base = endpoint(proc)
        assert get(f"{base}/stores") == (200, {"stores": ["counts"]})
        status, body = get(f"{base}/stores/nope/0/get?key=a")
        assert status == 404 and body["stores"] == ["counts"]
        expected = produce_users(kafka_bootstrap, name, 3000, 250, 2)
        want = expected_by_partition(expected, 2)
        for p in (0, 1):  # a commit every minute: the values come from the object cache
            wait_for_counts(base, p, want[p], timeout=90)
        user = sorted(want[1])[0]
        assert get(f"{base}/stores/counts/1/get?key={user}") == (200, {
            "store": "counts", "partition": 1, "key": user, "value": want[1][user],
            "found": True})
        assert get(f"{base}/stores/counts/0/get?key={user}")[1]["found"] is False
        for p in (0, 1):  # pages of 7 cover the partition once, in key order
            entries, pages = scan_pages(f"{base}/stores/counts/{p}/range?limit=7")
            assert entries == sorted(want[p].items())
            assert pages == -(-len(want[p]) // 7)
            lo, hi = "user-1", "user-2"
            ranged, _ = scan_pages(f"{base}/stores/counts/{p}/range?from={lo}&to={hi}&limit=5")
            assert ranged == sorted((u, n) for u, n in want[p].items() if lo <= u < hi)
            prefixed, _ = scan_pages(f"{base}/stores/counts/{p}/prefix?prefix=user-2&limit=4")
            assert prefixed == sorted((u, n) for u, n in want[p].items()
                                      if u.startswith("user-2"))
        status, body = get(f"{base}/stores/counts/2/get?key=user-2")
        assert status == 503 and "not assigned to this process" in body["error"], body
    finally:
        if proc.poll() is None:
            stop(proc)
    assert dump_store(config, "counts") == dict(expected)  # what it wrote, committed at stop


@pytest.mark.timeout(600)
def test_a_restoring_partition_answers_503_with_its_progress(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    name = f"query-restore-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, name, partitions=1)
    state = tmp_path / "state"
    props = counting_job(kafka_bootstrap, name, name, state,
                         **{"job.query.address": "127.0.0.1:0"})
    config = write_properties(tmp_path / "job.properties", props)
    users = 6_000
    expected = produce_users(kafka_bootstrap, name, users, users, 1)
    proc = start_job(config)
    try:
        base = endpoint(proc)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the job has counted every record
            entries, _ = scan_pages(f"{base}/stores/counts/0/range?limit=10000", answered=False)
            if dict(entries) == expected:
                break
        else:
            raise AssertionError("the job did not count every record")
    finally:
        stop(proc)
    shutil.rmtree(state)  # the next start restores the store from its changelog
    slow = {**props, "task.restore.listener.class": "tests.jobs.counting.SlowRestoreListener"}
    write_properties(config, slow)
    # Each restored batch holds the run loop 0.5 s, longer than the opener's time slice
    # (0.2 s): after every batch the loop serves the waiting query while the task restores.
    proc = start_job(config, env={"MILLPOND_TEST_RESTORE_DELAY": "0.5"})
    try:
        base = endpoint(proc)
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, body = get(f"{base}/stores/counts/0/get?key=user-7")
            if status == 200:
                break
            assert status == 503, body
            seen.append(body)
        assert (status, body["value"]) == (200, 1), body
        restoring = [b for b in seen if b.get("restore", {}).get("counts", {}).get("records")]
        assert restoring, seen  # at least one answer while it restored, with its progress
        progress = restoring[0]["restore"]["counts"]
        assert progress["records"] > 0 and progress["remaining"] >= 0, progress
        assert "restoring its stores" in restoring[0]["error"]
        assert all(b["partition"] == 0 for b in restoring)
        entries, _ = scan_pages(f"{base}/stores/counts/0/range?limit=10000")
        assert dict(entries) == dict(expected)
    finally:
        if proc.poll() is None:
            stop(proc)


def test_a_committed_query_sees_the_last_commit_not_what_was_processed_since(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    # One commit, right after the "commit" user's message; an object cache of 8 entries,
    # so most of what is processed after it is written down to RocksDB (evicted) before any
    # commit: the engine holds it, uncommitted.
    name, config = query_job(kafka_bootstrap, tmp_path, "query-committed", 1, **{
        "task.commit.ms": 3_600_000, "task.class": "tests.jobs.counting.CommittingCounter",
        "commit.on.user": "commit", "stores.counts.object.cache.size": 8})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    users = [f"user-{i:03d}" for i in range(200)]
    for user in [*users, "commit", *users, *users[:100]]:
        producer.produce(name, key=user.encode(), value=json.dumps({"user_id": user}))
    assert producer.flush(60) == 0
    processed = {**{u: 3 for u in users[:100]}, **{u: 2 for u in users[100:]}, "commit": 1}
    committed = {**{u: 1 for u in users}, "commit": 1}
    proc = start_job(config)
    try:
        base = endpoint(proc)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # until the job has processed every record
            entries, _ = scan_pages(f"{base}/stores/counts/0/range?limit=10000",
                              answered=False)
            if dict(entries) == processed:
                break
        else:
            raise AssertionError("the job did not process every record")
        entries, _ = scan_pages(f"{base}/stores/counts/0/range?limit=30&committed=1")
        assert dict(entries) == committed
        entries, _ = scan_pages(f"{base}/stores/counts/range?limit=50&committed=1")  # fan-out
        assert dict(entries) == committed
        assert get(f"{base}/stores/counts/get?key=user-007&committed=1")[1]["value"] == 1
        assert get(f"{base}/stores/counts/get?key=user-007")[1]["value"] == 3
        status, body = get(f"{base}/stores/counts/0/get-many?key=user-150&key=nobody"
                           "&committed=true")
        assert (status, body["entries"], body["missing"]) == (
            200, [{"key": "user-150", "value": 1}], ["nobody"])
    finally:
        if proc.poll() is None:
            stop(proc)
    assert dump_store(config, "counts") == processed  # committed at stop

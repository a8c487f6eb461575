"""The tooling works on a dataflow's stores unchanged: one job of an app with a key_by and two
stateful operators (``page-counts`` after the key_by, JSON keys; ``user-stats`` on the source's
string keys), run against the broker with backups to S3, then `millpond store get|dump`,
`restore` and `restore --from-backup` (an S3 snapshot plus the changelog tail), each reading
the properties file a user writes (app.class; no task.class, task.inputs or stores). The Spark
tools on the same app's stores: tests/cluster/test_spark_cluster.py.

One job serves every test (a module fixture; the tests restore what they wipe), and the state
after a restore is read in-process with what `store dump` runs: each command costs a second."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from millpond.backup import BackupLocation
from millpond.ops.offline import Job
from millpond.streams.compile import load_config
from tests.conftest import S3
from tests.kafka_util import (
    create_topic,
    hash_partition,
    millpond,
    read_topic,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 2
STORES = ("page-counts", "user-stats")
APP = "tests.streams.apps:views_by_page_and_user"


@dataclass
class ViewsJob:
    """The job's properties file, where its state lives, and its stores' expected contents."""

    config: Path
    name: str
    state: Path
    expected: dict[str, dict[str, Any]]  # store -> key -> value


def produce_views(bootstrap: str, topic: str, start: int, n: int) -> list[dict[str, Any]]:
    """``n`` page views of 40 users over 7 pages, keyed (and partitioned) by user."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    views = []
    for i in range(start, start + n):
        user = f"user-{(i * 7919) % 40}"
        view = {"user_id": user, "page": f"/p{i % 7}", "seconds": i % 11}
        producer.produce(topic, json.dumps(view), user.encode(),
                         partition=hash_partition(user, PARTITIONS))
        views.append(view)
    assert producer.flush(30) == 0
    return views


def expected_state(views: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    users: dict[str, dict[str, int]] = {}
    for v in views:
        stats = users.setdefault(v["user_id"], {"n": 0, "seconds": 0})
        stats["n"] += 1
        stats["seconds"] += v["seconds"]
    return {"page-counts": dict(Counter(v["page"] for v in views)), "user-stats": users}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`millpond *args`, which must succeed."""
    done = millpond(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def dump(job: ViewsJob, store: str) -> dict[str, tuple[int, Any]]:
    """`millpond store dump` of ``store``: key -> (partition, value)."""
    out = cli("store", "dump", "--config", str(job.config), "--store", store)
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len({r["key"] for r in rows}) == len(rows), "a key in two partitions"
    return {r["key"]: (r["partition"], r["value"]) for r in rows}


def stored_state(job: ViewsJob) -> dict[str, dict[str, Any]]:
    """Both stores as `store dump` reads them (in-process)."""
    from millpond.ops.describe import read_store

    on_disk = Job(load_config(job.config))
    return {store: {k: v for _, k, v in read_store(on_disk, store)} for store in STORES}


# One row of `millpond restore`: store, partition, records, ..., mode and what follows it.
RESTORED = re.compile(r"^(\S+)\s+(\d+)\s+(\d+)\s+\d+\s+[\d.]+\s+\d+\s+[\d.]+\s+(full|tail)(.*)$",
                      re.M)


@pytest.fixture(scope="module")
def views_job(kafka_bootstrap: str, s3: S3, tmp_path_factory: pytest.TempPathFactory,
              ) -> ViewsJob:
    """The app run twice: with backups on, then on more views with its stores' backups off
    (``stores.<operator>.backup.enabled=false``, as for any store), so each store partition's
    newest snapshot is behind its changelog."""
    root = tmp_path_factory.mktemp("views-job")
    salt = uuid.uuid4().hex[:8]
    source, name = f"tooling-views-{salt}", f"tooling-{salt}"
    create_topic(kafka_bootstrap, source, PARTITIONS)
    config = write_properties(root / "job.properties", {
        "job.name": name,
        "app.class": APP,
        "views.topic": source,
        "task.commit.ms": 100,  # a bounded run ends a few commits after its input
        "systems.kafka.bootstrap.servers": kafka_bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "job.logged.store.base.dir": str(root / "state"),
        "job.state.backup.interval.ms": 0,
        **s3.properties(name),
    })
    views = produce_views(kafka_bootstrap, source, 0, 2000)
    first = run_job(config, "--bounded", timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "ignoring app.class" not in first.stderr  # the compiled task.class is the app's
    views += produce_views(kafka_bootstrap, source, 2000, 300)
    off = [a for store in STORES
           for a in ("--config-override", f"stores.{store}.backup.enabled=false")]
    second = run_job(config, "--bounded", *off, timeout=120)
    assert second.returncode == 0, second.stderr[-3000:]
    return ViewsJob(config, name, root / "state", expected_state(views))


def test_store_dump_and_get_read_both_operator_stores(views_job: ViewsJob) -> None:
    pages, users = dump(views_job, "page-counts"), dump(views_job, "user-stats")
    assert {k: v for k, (_, v) in pages.items()} == views_job.expected["page-counts"]
    assert {k: v for k, (_, v) in users.items()} == views_job.expected["user-stats"]
    assert {p for p, _ in pages.values()} == {p for p, _ in users.values()} == {0, 1}
    # users stay in their source partition; pages are where the key_by sent them
    assert all(p == hash_partition(k, PARTITIONS) for k, (p, _) in users.items())

    # get: a JSON key as typed or as JSON text; a missing key is null
    part, count = pages["/p3"]
    got = cli("store", "get", "--config", str(views_job.config), "--store", "page-counts",
                   "--partition", str(part), "/p3", '"/p3"', "/nowhere")
    assert [json.loads(line) for line in got.stdout.splitlines()] == [
        {"partition": part, "key": "/p3", "value": count},
        {"partition": part, "key": "/p3", "value": count},
        {"partition": part, "key": "/nowhere", "value": None}]
    got = cli("store", "get", "--config", str(views_job.config), "--store", "user-stats",
                   "--partition", "1", "user-7", "user-8")
    assert [json.loads(line) for line in got.stdout.splitlines()] == [
        {"partition": 1, "key": "user-7", "value": users["user-7"][1]},
        {"partition": 1, "key": "user-8", "value": None}]  # in partition 0


def test_restore_rebuilds_a_wiped_state_dir(views_job: ViewsJob) -> None:
    shutil.rmtree(views_job.state)
    done = cli("restore", "--config", str(views_job.config))
    rows = RESTORED.findall(done.stdout)
    assert sorted((store, int(p)) for store, p, *_ in rows) == [
        (store, p) for store in STORES for p in range(PARTITIONS)], done.stdout
    assert all(mode == "full" and int(n) > 0 for _, _, n, mode, _ in rows), done.stdout
    assert stored_state(views_job) == views_job.expected


def test_restore_from_s3_snapshots_and_the_changelog_tails(
    views_job: ViewsJob, kafka_bootstrap: str,
) -> None:
    config = load_config(views_job.config)
    location = BackupLocation.from_config(config)
    newest = {(store, p): location.snapshots(store, p)[0]
              for store in STORES for p in range(PARTITIONS)}
    checkpoints = Job(config).checkpoints()
    # the changelog records after each snapshot, up to the job's checkpoint
    tails = {}
    for store in STORES:
        records = read_topic(kafka_bootstrap, f"{views_job.name}-1-{store}-changelog")
        for p in range(PARTITIONS):
            upto = checkpoints[f"partition-{p}"].changelogs[store]
            after = newest[(store, p)].offset
            tails[(store, p)] = sum(1 for m in records if m.partition() == p
                                    and after < m.offset() <= upto)  # type: ignore[operator]

    shutil.rmtree(views_job.state)  # the machine is lost
    done = cli("restore", "--from-backup", "--config", str(views_job.config))
    rows = {(store, int(p)): (int(n), mode, rest)
            for store, p, n, mode, rest in RESTORED.findall(done.stdout)}
    assert set(rows) == set(newest), done.stdout
    for key, (records, mode, rest) in rows.items():
        assert newest[key].offset >= 0, f"{key}: the newest snapshot holds no state"
        assert mode == "tail" and rest.startswith(f" after snapshot {newest[key].id} "), rest
        assert records == tails[key] > 0, (key, records, tails[key])
    assert stored_state(views_job) == views_job.expected

"""Damaged local state, a lost changelog, a restarted broker, and two owners of one store."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import Broker, unavailable
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    run_job,
    start_job,
    state_diff,
    wait_for_line,
    write_properties,
)

pytestmark = pytest.mark.kafka


def _damage(kind: str, live: Path) -> None:
    if kind == "store dir deleted":
        shutil.rmtree(live)
    elif kind == "SST truncated":
        ssts = sorted(live.glob("*.sst"))
        assert ssts, f"no SST files in {live}"
        for sst in ssts:
            size = sst.stat().st_size
            with open(sst, "r+b") as fh:
                fh.truncate(size // 2)
    elif kind == "OFFSET garbage":
        (live / "OFFSET").write_text("\x00garbage{")
    elif kind == "OFFSET ahead of changelog":
        doc = json.loads((live / "OFFSET").read_text())
        doc["offset"] = 10**9
        (live / "OFFSET").write_text(json.dumps(doc))


@pytest.mark.parametrize("kind", ["store dir deleted", "SST truncated", "OFFSET garbage",
                                  "OFFSET ahead of changelog"])
def test_local_state_damage_ends_in_full_restore(
    kind: str, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 4000, 300, 2)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state"))
    assert run_job(conf, "--bounded").returncode == 0
    live = tmp_path / "state" / name / "counts" / "partition-0"
    _damage(kind, live)
    expected += produce_users(kafka_bootstrap, source, 2000, 300, 2)
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    if kind != "store dir deleted":
        assert "full restore" in run.stderr, run.stderr[-3000:]
    state = dump_store(conf, "counts")
    lost, dup = state_diff(state, expected)
    report(f"local state: {kind}", "then more input and a restart", lost, dup,
           "full restore, exact" if lost == dup == 0 else "DIFF")
    assert state == dict(expected)


def test_recreated_changelog_is_refused_then_reseeded_from_local(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 3000, 200, 2)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state"))
    assert run_job(conf, "--bounded").returncode == 0
    changelog = f"{name}-counts-changelog"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([changelog])[changelog].result(timeout=30)
    deadline = time.monotonic() + 30
    while changelog in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    create_topic(kafka_bootstrap, changelog, 2, **{"cleanup.policy": "compact"})

    refused = run_job(conf, "--bounded")
    assert refused.returncode != 0
    assert "was deleted, recreated or truncated" in refused.stderr
    assert "restore --from-local" in refused.stderr

    reseed = millpond("restore", "--config", str(conf), "--from-local")
    assert reseed.returncode == 0, reseed.stderr
    expected += produce_users(kafka_bootstrap, source, 1000, 200, 2)
    assert run_job(conf, "--bounded").returncode == 0
    shutil.rmtree(tmp_path / "state")  # prove the changelog alone now holds the state
    assert millpond("restore", "--config", str(conf)).returncode == 0
    state = dump_store(conf, "counts")
    lost, dup = state_diff(state, expected)
    report("changelog deleted + recreated empty", "refused; restore --from-local; restart",
           lost, dup, "refused, re-seeded, exact" if lost == dup == 0 else "DIFF")
    assert state == dict(expected)


def test_broker_restart_mid_run(
    report: Callable[..., None], kafka_broker: Broker, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    from millpond.dev.kafka import LocalKafka

    if not isinstance(kafka_broker.local, LocalKafka):
        unavailable("broker restart needs the locally run broker")
    broker = kafka_broker.local
    assert isinstance(broker, LocalKafka)
    bootstrap = broker.bootstrap
    source, name = topic_name("in"), topic_name("job")
    create_topic(bootstrap, source, 2)
    expected = produce_users(bootstrap, source, 6000, 200, 2)
    props = counting_job(bootstrap, name, source, tmp_path / "state",
                         **{"task.class": "tests.jobs.counting.SlowCounter"})
    # A static member is fenced by its own instance id after a broker restart (fatal in
    # librdkafka), so this job uses dynamic membership.
    del props["systems.kafka.consumer.group.instance.id"]
    conf = write_properties(tmp_path / "job.properties", props)
    proc = start_job(conf, "--bounded", env={"MILLPOND_TEST_DELAY": "0.001"})
    try:
        started = "".join(wait_for_line(proc, "ready", timeout=120))  # mid-run, not mid-start
        time.sleep(1)
        assert proc.poll() is None, "job ended before the broker restart"
        broker.stop()
        time.sleep(3)
        broker.start(timeout=120)
        try:
            out, _ = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate(timeout=30)
            ours = [line for line in (started + out).splitlines() if not line.startswith("%")]
            raise AssertionError("job did not finish within 180 s of the broker restart:\n"
                                 + "\n".join(ours[-60:])) from None
        out = started + out
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert "Kafka broker unreachable" in out
    state = dump_store(conf, "counts")
    lost, dup = state_diff(state, expected)
    report("broker stopped 3 s mid-run", "job waits, reconnects, finishes", lost, dup,
           "exact" if lost == dup == 0 else "DIFF")
    assert state == dict(expected)


def test_second_owner_of_a_store_is_refused(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    produce_users(kafka_bootstrap, source, 3000, 50, 1)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state",
        **{"task.class": "tests.jobs.counting.SlowCounter"}))
    proc = start_job(conf, "--bounded", env={"MILLPOND_TEST_DELAY": "0.002"})
    try:
        wait_for_line(proc, "ready", timeout=60)
        other = millpond("restore", "--config", str(conf))
        dumped = millpond("store", "dump", "--config", str(conf), "--store", "counts")
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert other.returncode != 0 and "is in use by pid" in other.stderr, other.stderr
    assert dumped.returncode != 0 and "is in use by pid" in dumped.stderr
    report("second process on the same store dir", "restore + dump while job runs", 0, 0,
           "refused by lock")

"""Damaged local state, a lost changelog, a restarted broker, and two owners of one store."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from millpond.changelog.local import checkpoint_dir
from tests.conftest import Broker, unavailable
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    read_topic,
    ready_lines,
    run_job,
    start_job,
    state_diff,
    wait_for_line,
    write_properties,
)

pytestmark = pytest.mark.kafka


def _damage(kind: str, live: Path) -> None:
    """Damage partition-0's local state: its live directory and, where the case says so,
    the last commit's checkpoint beside it (``partition-0.checkpoint``, see
    :mod:`millpond.changelog.local`), which recovery falls back to."""
    ckpt = checkpoint_dir(live)
    assert (live / "OFFSET").is_file() and (ckpt / "OFFSET").is_file(), "nothing to damage"
    if kind == "store dir deleted":
        shutil.rmtree(live)
        shutil.rmtree(ckpt)
    elif kind == "SST truncated":
        ssts = sorted(live.glob("*.sst"))
        assert ssts, f"no SST files in {live}"
        for sst in ssts:  # hard links: the checkpoint's SST files are truncated with them
            size = sst.stat().st_size
            with open(sst, "r+b") as fh:
                fh.truncate(size // 2)
    elif kind == "OFFSET garbage":
        (live / "OFFSET").write_text("\x00garbage{")
        (ckpt / "OFFSET").write_text("\x00garbage{")
    elif kind == "OFFSET binary garbage":  # not UTF-8: handled as text garbage is (#35)
        (live / "OFFSET").write_bytes(b"\xff\xfe\x00\x81garbage")
        (ckpt / "OFFSET").write_bytes(b"\x80\x81\x82")
    elif kind == "OFFSET garbage (live copy only)":
        (live / "OFFSET").write_text("\x00garbage{")
    elif kind == "OFFSET ahead of changelog":
        doc = json.loads((live / "OFFSET").read_text())
        doc["offset"] = 10**9
        (live / "OFFSET").write_text(json.dumps(doc))


# What partition-0's store restarts from after each damage: "full" (the whole changelog
# replayed into an empty store) or "checkpoint" (the last commit's checkpoint, which is at
# the changelog's end here: nothing to replay).
DAMAGE = {
    "store dir deleted": "full",
    "SST truncated": "full",
    "OFFSET garbage": "full",
    "OFFSET binary garbage": "full",
    "OFFSET garbage (live copy only)": "checkpoint",
    "OFFSET ahead of changelog": "full",
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_local_state_damage_ends_in_full_restore(
    kind: str, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """Damaged local state of one task: it is restored in full from its changelog (or from
    the last commit's checkpoint, where only the live copy was damaged), the undamaged task
    from its live directory, and the state is exact."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 4000, 300, 2)
    conf = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state"))
    assert run_job(conf, "--bounded").returncode == 0
    live = tmp_path / "state" / name / "counts" / "partition-0"
    _damage(kind, live)
    if kind == "OFFSET binary garbage":  # store dump reads it too: a warning, no traceback
        dumped = millpond("store", "dump", "--config", str(conf), "--store", "counts")
        assert dumped.returncode == 0 and "Traceback" not in dumped.stderr, dumped.stderr
        assert "holds writes after the last commit" in dumped.stderr, dumped.stderr
    changelog = Counter(m.partition()
                        for m in read_topic(kafka_bootstrap, f"{name}-counts-changelog"))
    assert changelog[0] > 0, changelog
    expected += produce_users(kafka_bootstrap, source, 2000, 300, 2)
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    restored = {task: records for task, records, _ in ready_lines(run.stderr)}
    if DAMAGE[kind] == "full":
        assert restored["partition-0"] == changelog[0], (
            f"not a full restore: {restored} of {dict(changelog)} changelog records")
        if kind != "store dir deleted":  # nothing left to warn about: no local copy at all
            assert "full restore" in run.stderr, run.stderr[-3000:]
    else:
        assert restored["partition-0"] == 0, restored
        assert "using the last commit's checkpoint" in run.stderr, run.stderr[-3000:]
    assert restored["partition-1"] == 0, f"the undamaged task restored records: {restored}"
    state = dump_store(conf, "counts")
    lost, dup = state_diff(state, expected)
    outcome = ("full restore" if DAMAGE[kind] == "full"
               else "restored from the last commit's checkpoint")
    report(f"local state: {kind}", "then more input and a restart", lost, dup,
           f"{outcome} ({restored['partition-0']} records), exact"
           if lost == dup == 0 else "DIFF")
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
    assert refused.returncode == 1  # a changelog lost: a runtime failure
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
    assert other.returncode == 2 and "is in use by pid" in other.stderr, other.stderr
    assert dumped.returncode == 2 and "is in use by pid" in dumped.stderr
    report("second process on the same store dir", "restore + dump while job runs", 0, 0,
           "refused by lock")

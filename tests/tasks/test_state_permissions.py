"""Data at rest: a real job's state directory and its file:// backups give other local users
nothing (job.state.permissions, default 0750 / files 0640), whatever the umask lets RocksDB
and Python create; a configured mode is honoured, also on state an earlier run left wider."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from millpond.changelog.checkpoint import OFFSET_FILE
from millpond.sideinputs.local import SIDE_INPUTS_FILE
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, inherited by the job's process: without millpond's modes its files
    would be 0644 and its directories 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of ``root`` and every entry below it."""
    out = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def assert_modes(root: Path, dir_mode: int, file_mode: int) -> dict[str, int]:
    """Every directory under ``root`` (itself included) has ``dir_mode``, every file
    ``file_mode``; nothing grants others any permission."""
    found = modes(root)
    wrong = {}
    for rel, mode in found.items():
        path = root / rel
        want = dir_mode if path.is_dir() else file_mode
        if mode != want or mode & 0o007:
            wrong[rel] = f"{mode:04o} (want {want:04o})"
    assert not wrong, f"under {root}: {wrong}"
    return found


def test_a_jobs_state_and_local_backups_are_closed_to_others(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, umask_022: None,
) -> None:
    source, side, job = topic_name("in"), topic_name("side"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    create_topic(kafka_bootstrap, side, 2, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(20):
        producer.produce(side, key=f"user-{i}".encode(), value=json.dumps({"n": i}).encode(),
                         partition=i % 2)
    assert producer.flush(30) == 0
    state, backups = tmp_path / "state", tmp_path / "backups"
    props = counting_job(
        kafka_bootstrap, job, source, state,
        **{"task.commit.ms": 200, "stores.counts.object.cache.size": 0,
           "job.state.backup.uri": f"file://{backups}", "job.state.backup.interval.ms": 0,
           # a side-input store: its SIDE_INPUTS file and RocksDB files
           "stores.profiles.factory": "rocksdb", "stores.profiles.key.serde": "string",
           "stores.profiles.msg.serde": "json", "stores.profiles.side.inputs": f"kafka.{side}",
           "stores.profiles.side.inputs.processor.factory":
               "millpond.sideinputs.KeyValueProcessor"})
    config = write_properties(tmp_path / "job.properties", props)
    expected: Counter[str] = produce_users(kafka_bootstrap, source, 3_000, 200, 2)

    first = run_job(config, "--bounded", timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    # <base> did not exist: millpond made it too, so it has the mode as well
    found = assert_modes(state, 0o750, 0o640)
    for p in (0, 1):  # what is checked is really there
        assert f"{job}/counts/partition-{p}/{OFFSET_FILE}" in found
        assert f"{job}/counts/partition-{p}.checkpoint/{OFFSET_FILE}" in found
        assert f"{job}/counts/partition-{p}.lock" in found
        assert f"{job}/profiles/partition-{p}/{SIDE_INPUTS_FILE}" in found
        assert any(rel.startswith(f"{job}/counts/partition-{p}/") and rel.endswith(".sst")
                   for rel in found)
    job_backups = backups / f"{job}-1"
    found = assert_modes(job_backups, 0o750, 0o640)
    assert any(rel.endswith("snapshot.json") for rel in found), found
    assert any(rel.endswith(".sst") for rel in found), found
    # the backup location's own directory is the user's: only what millpond made in it counts
    assert stat.S_IMODE(backups.stat().st_mode) == 0o750  # it did not exist either

    # a lost machine: the state comes back from the local backup (downloaded files too)
    shutil.rmtree(state)
    restored = millpond("restore", "--from-backup", "--config", str(config))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "snapshot" in restored.stdout, restored.stdout
    assert_modes(state, 0o750, 0o640)
    assert dump_store(config, "counts") == dict(expected)

    # owner only, on the state and backups this run found at 0750/0640
    expected += produce_users(kafka_bootstrap, source, 500, 200, 2)
    second = run_job(config, "--bounded", "--config-override", "job.state.permissions=0700",
                     timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{state / job} had mode 0750: set it and the" in second.stderr, second.stderr[-3000:]
    assert_modes(state / job, 0o700, 0o600)
    assert_modes(job_backups, 0o700, 0o600)
    assert stat.S_IMODE(state.stat().st_mode) == 0o750, "an existing <base> is left alone"
    assert dump_store(config, "counts") == dict(expected)


def test_state_left_readable_by_an_older_version_is_closed_at_start(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, umask_022: None,
) -> None:
    """State written before job.state.permissions existed (0755 directories, 0644 files, as
    the umask made them) is narrowed when the job starts, with one log line."""
    source, job = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    state = tmp_path / "state"
    config = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, job, source, state))
    expected: Counter[str] = produce_users(kafka_bootstrap, source, 1_000, 50, 1)
    first = run_job(config, "--bounded", timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    # what an older millpond left: everything as the umask made it, plus a store the job
    # no longer has
    old = state / job / "retired" / "partition-0"
    old.mkdir(parents=True)
    (old / "000009.sst").write_bytes(b"old state")
    for path in [state / job, *(state / job).rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert modes(state / job)["retired/partition-0/000009.sst"] == 0o644

    second = run_job(config, "--bounded", timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    log = second.stdout + second.stderr
    assert log.count(f"{state / job} had mode 0755: set it and the") == 1, log[-3000:]
    found = assert_modes(state / job, 0o750, 0o640)
    assert found["retired/partition-0/000009.sst"] == 0o640
    assert dump_store(config, "counts") == dict(expected)

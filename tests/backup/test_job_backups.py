"""A running job backs its stores up to a real S3 server; a lost state directory comes
back from the newest snapshot plus the changelog tail, with exact counts."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from millpond.backup import BackupLocation
from millpond.config import Config
from millpond.ops.offline import Job
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    read_topic,
    ready_lines,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka


def checkpointed(config: Path) -> int:
    """The counts store's changelog offset in the job's checkpoint of task partition-0."""
    return Job(Config.load(config)).checkpoints()["partition-0"].changelogs["counts"]


def test_a_wiped_store_restores_from_snapshot_and_tail(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, s3: Any,
) -> None:
    source, job = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    state = tmp_path / "state"
    props = counting_job(kafka_bootstrap, job, source, state,
                         **{"job.state.backup.interval.ms": 0, "task.commit.ms": 200,
                            "stores.counts.object.cache.size": 0,  # a record per update
                            # ~6 s of processing: snapshots are uploaded while it runs
                            "task.class": "tests.jobs.counting.SlowCounter",

                            **s3.properties(job)})
    config = write_properties(tmp_path / "job.properties", props)
    loc = BackupLocation.from_config(Config.load(config))

    expected: Counter[str] = produce_users(kafka_bootstrap, source, 20_000, 3_000, 1)
    first = run_job(config, "--bounded", timeout=120, env={"MILLPOND_TEST_DELAY": "0.0003"})
    assert first.returncode == 0, first.stdout + first.stderr
    snaps = loc.snapshots("counts", 0)
    assert snaps, "the job uploaded no snapshot:\n" + first.stderr[-3000:]
    snapshot_offset = snaps[0].offset
    assert 0 <= snapshot_offset <= checkpointed(config)
    # retain=3 by default; the last upload's prune may have been cut off at process exit
    # (s3fs fails during interpreter shutdown, see the uploader's close): one extra at most
    assert len(snaps) <= 4

    # more input with the store's backups off: the snapshot falls behind the checkpoint
    expected += produce_users(kafka_bootstrap, source, 2_000, 3_000, 1)
    second = run_job(config, "--bounded", "--config-override", "stores.counts.backup.enabled=false",
                     timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    target = checkpointed(config)
    assert target > snapshot_offset
    assert loc.snapshots("counts", 0)[0].offset == snapshot_offset

    shutil.rmtree(state)  # the machine is lost
    third = run_job(config, "--bounded", timeout=120)
    assert third.returncode == 0, third.stdout + third.stderr
    log = third.stdout + third.stderr
    assert "downloaded snapshot" in log, log[-3000:]
    changelog = [m for m in read_topic(kafka_bootstrap, f"{job}-counts-changelog")
                 if m.offset() <= target]  # type: ignore[operator]
    tail = sum(1 for m in changelog if m.offset() > snapshot_offset)  # type: ignore[operator]
    [(task, restored, _)] = ready_lines(log)
    assert restored == tail, "exactly the changelog tail after the snapshot is replayed"
    # the snapshot spared replaying everything up to its offset
    assert 0 < restored <= len(changelog) - sum(
        1 for m in changelog if m.offset() <= snapshot_offset)  # type: ignore[operator]
    assert restored + sum(1 for m in changelog if m.offset() <= snapshot_offset) == len(
        changelog)  # type: ignore[operator]
    assert dump_store(config, "counts") == dict(expected)

    # the same offline, on request, from the newest snapshot (the third run uploaded more)
    newest = loc.snapshots("counts", 0)[0]
    assert newest.offset <= checkpointed(config)
    shutil.rmtree(state)
    offline = millpond("restore", "--from-backup", "--config", str(config))
    assert offline.returncode == 0, offline.stdout + offline.stderr
    # The summary gives the download's own time and rate (the row's seconds and rates are
    # the changelog tail's, which may be 0).
    got = re.search(rf"after snapshot {newest.id} \((\d+) bytes downloaded in ([\d.]+) s, "
                    r"([\d.]+) (GB|MB|kB|B)/s\)", offline.stdout)
    assert got is not None, offline.stdout
    assert int(got[1]) == newest.bytes > 0 and float(got[2]) > 0 and float(got[3]) > 0, got[0]
    assert dump_store(config, "counts") == dict(expected)


def test_the_snapshot_after_a_restore_holds_the_restored_state(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, s3: Any,
) -> None:
    """A process gets a partition back that another one processed meanwhile: its store
    directory (and the last commit's checkpoint beside it) is from before, so the
    changelog tail is replayed into it. The snapshot uploaded after that must hold the
    restored state, not the checkpoint from before labelled with the new offset (restoring
    from it would lose the tail). Found by the zombie chaos run with backups on."""
    source, job = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)

    def config(name: str) -> Path:
        return write_properties(tmp_path / f"{name}.properties", counting_job(
            kafka_bootstrap, job, source, tmp_path / name,
            **{"job.state.backup.interval.ms": 0, **s3.properties(job)}))

    a, b = config("state-a"), config("state-b")
    off = ("--config-override", "stores.counts.backup.enabled=false")
    expected: Counter[str] = produce_users(kafka_bootstrap, source, 3_000, 500, 1)
    first = run_job(a, "--bounded", *off)
    assert first.returncode == 0, first.stderr[-3000:]
    expected += produce_users(kafka_bootstrap, source, 3_000, 500, 1)
    other = run_job(b, "--bounded", *off)  # another machine takes the partition
    assert other.returncode == 0, other.stderr[-3000:]
    back = run_job(a, "--bounded")  # back on the first one, backups on: no new input
    assert back.returncode == 0, back.stderr[-3000:]
    [(_, replayed, _)] = ready_lines(back.stdout + back.stderr)
    assert replayed > 0, "the tail was replayed into the old store directory"
    assert dump_store(a, "counts") == dict(expected)
    loc = BackupLocation.from_config(Config.load(a))
    newest = loc.snapshots("counts", 0)[0]
    assert newest.offset == checkpointed(a)

    shutil.rmtree(tmp_path / "state-a")
    offline = millpond("restore", "--from-backup", "--config", str(a))
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert f"after snapshot {newest.id}" in offline.stdout, offline.stdout
    assert dump_store(a, "counts") == dict(expected)

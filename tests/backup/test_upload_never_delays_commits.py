"""A backup never delays a commit (docs/operations/backups.md): the checkpoint is staged and
uploaded by a background thread. The job backs up to a real S3 server through a proxy that
passes 2 KB/s of what the job sends, so its first snapshot takes seconds to upload; while it
is in flight (from its first object in the bucket to its ``snapshot.json``, read from the
server directly) the job keeps committing at its ``task.commit.ms`` pace, each commit moving
the input on. A commit that waited for the upload would commit once in that window."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from millpond.backup import BackupLocation
from tests.conftest import S3
from tests.faults.test_backup_faults import SlowProxy, wait_until
from tests.kafka_util import (
    checkpoint_records,
    counting_job,
    create_topic,
    produce_users,
    start_job,
    stop_job,
    write_properties,
)

# ~35 s (a first snapshot uploaded at 2 KB/s while 60,000 inputs are processed): make test-slow
pytestmark = [pytest.mark.kafka, pytest.mark.slow]

COMMIT_MS = 200


def test_commits_go_on_while_a_snapshot_uploads(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, s3: S3,
) -> None:
    import s3fs

    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    produce_users(kafka_bootstrap, source, 60_000, 3_000, 1)
    slow = SlowProxy(s3.server.port, rate=2_000)
    backup = {**s3.properties(name),
              "job.state.backup.options.client_kwargs.endpoint_url": slow.endpoint}
    config = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, source, tmp_path / "state", **{
            "task.class": "tests.jobs.counting.SlowCounter",  # input for ~12 s
            "task.commit.ms": COMMIT_MS,
            "job.state.backup.interval.ms": 0, **backup}))
    direct = BackupLocation(s3.uri(name), f"{name}-1", s3.options)  # not through the proxy
    fs = s3fs.S3FileSystem(**s3.options, skip_instance_cache=True)
    prefix = s3.uri(name).removeprefix("s3://")

    job = start_job(config, env={"MILLPOND_TEST_DELAY": "0.0002"})
    try:
        def uploading() -> bool:
            fs.invalidate_cache()
            return bool(fs.find(prefix))

        wait_until("a first object in the bucket", uploading, 90, job)
        began = time.time()
        wait_until("the first snapshot complete", lambda: direct.manifests("counts", 0), 120,
                   job)
        ended = time.time()
        assert job.poll() is None, "the job ended before the upload did"
    finally:
        slow.close()  # the next upload fails at once instead of holding the stop up
        stop_job(job, timeout=60)

    assert ended - began >= 2, f"the upload was not slow ({ended - began:.1f} s)"
    records = checkpoint_records(kafka_bootstrap, name)[0]
    during = [(at, inputs[source]) for at, inputs in records if began <= at <= ended]
    moved = sum(1 for (_, a), (_, b) in zip(during, during[1:], strict=False) if b > a)
    times = [began] + [at for at, _ in during] + [ended]
    gap = max(b - a for a, b in zip(times, times[1:], strict=False))
    # commits go on at the job's pace (a batch of input each here): a commit that waited for
    # the upload would leave one gap as long as the upload
    assert moved >= 3 and gap < (ended - began) / 2, (
        f"{moved} commits moved input in the {ended - began:.1f} s the upload took, the "
        f"longest gap {gap:.1f} s: {during}")

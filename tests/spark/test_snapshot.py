"""snapshot(): Structured Streaming SIGKILLed mid-batch and restarted still ends equal to rebuild."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from millpond.spark.rebuild import rebuild
from millpond.spark.snapshot import MARKER, VERSIONS, current_version, read_snapshot, snapshot
from tests.spark.conftest import FAST_JVM, FAST_SQL
from tests.spark.helpers import STORE, ChangelogJob, random_updates, reference, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

START_TIMEOUT = 120.0  # a Spark JVM start plus its first batches on a loaded 2-core machine


def state_of(df: Any) -> dict[tuple[int, bytes], tuple[bytes, int]]:
    return {(r["partition"], bytes(r["key_bytes"])): (bytes(r["value_bytes"]), r["offset"])
            for r in df.collect()}


def versions(out: Path) -> dict[int, bool]:
    """Version directories present: batch id -> complete (marker written)."""
    root = out / VERSIONS
    if not root.is_dir():
        return {}
    return {int(d.name): (d / MARKER).is_file() for d in root.iterdir() if d.name.isdigit()}


class Snapshotter:
    """``millpond spark snapshot`` in continuous mode as a subprocess we can SIGKILL."""

    def __init__(self, job: ChangelogJob, out: Path, checkpoint: Path, logs: Path) -> None:
        self.cmd = [
            sys.executable, "-m", "millpond.spark.cli", "snapshot", "-c", str(job.config_path),
            "--store", STORE, "--out", str(out), "--checkpoint-location", str(checkpoint),
            "--interval", "500 milliseconds", "--max-records-per-batch", "300",
            "--master", "local[2]", "--shuffle-partitions", "2",
            "--spark-conf", f"spark.driver.extraJavaOptions={FAST_JVM}",
            *(arg for k, v in FAST_SQL.items() for arg in ("--spark-conf", f"{k}={v}")),
            # a SIGKILLed Spark leaves its scratch directory behind: keep it in tmp_path
            "--spark-conf", f"spark.local.dir={logs / 'spark-local'}",
        ]
        self.logs = logs
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, run: int) -> None:
        log = open(self.logs / f"snapshot-{run}.log", "wb")  # noqa: SIM115 - closed with proc
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the snapshot's whole process group: Python driver, JVM, Python workers."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def log_tail(self, run: int) -> str:
        return (self.logs / f"snapshot-{run}.log").read_text(errors="replace")[-3000:]


def test_snapshot_killed_twice_during_updates_ends_equal_to_rebuild(
    spark: Any, make_job: Callable[..., ChangelogJob], tmp_path: Path
) -> None:
    job = make_job(partitions=3)
    job.produce(random_updates(job, 400, keys=60, seed=21))
    out, checkpoint = tmp_path / "snapshot", tmp_path / "checkpoint"
    stop = threading.Event()

    def keep_updating() -> None:
        round_ = 0
        while not stop.is_set() and round_ < 600:
            job.produce(random_updates(job, 10, keys=60, seed=100 + round_,
                                       start=1000 + 10 * round_))
            round_ += 1
            stop.wait(0.2)

    producer = threading.Thread(target=keep_updating, daemon=True)
    producer.start()
    runner = Snapshotter(job, out, checkpoint, tmp_path)
    try:
        # Run 1: kill in the middle of writing the first version (directory, no marker yet).
        runner.start(1)
        wait_for(lambda: any(not done for done in versions(out).values())
                 or not runner.alive(), START_TIMEOUT, "a version being written")
        assert runner.alive(), runner.log_tail(1)
        runner.kill()
        assert any(not done for done in versions(out).values()), "meant to land mid-batch"

        # Run 2: it re-runs that batch; kill right after it switches CURRENT to the new
        # version (most likely before Spark commits the batch).
        runner.start(2)
        wait_for(lambda: current_version(out) is not None or not runner.alive(),
                 START_TIMEOUT, "a complete version after the restart")
        assert runner.alive(), runner.log_tail(2)
        runner.kill()
    finally:
        stop.set()
        producer.join(timeout=60)
        if runner.alive():
            runner.kill()
    assert not producer.is_alive()

    # Restart 3, in-process: apply the rest of the changelog, then stop.
    result = snapshot(job.config, STORE, out, checkpoint, available_now=True, timeout=120,
                      spark=spark)

    expected = reference(job.records)
    assert state_of(read_snapshot(spark, out)) == expected
    rebuilt = rebuild(job.config, STORE, tmp_path / "rebuilt", spark=spark)
    assert state_of(spark.read.parquet(str(tmp_path / "rebuilt"))) == expected
    ends = {p: s.end for p, s in rebuilt.partitions.items()}
    assert result.as_of == {p: end - 1 for p, end in ends.items()}
    assert result.keys == len(expected)
    snap = read_snapshot(spark, out)
    assert dict(snap.dtypes)["value"].startswith("struct<")

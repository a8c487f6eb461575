"""The background uploader: staged copies, one upload in flight per store partition, the
interval, and an unreachable object store that only makes backups fall behind."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from millpond.backup import BackupLocation, BackupUploader
from millpond.dev.kafka import free_port
from millpond.stores import RocksDbEngine
from tests.backup.helpers import TOPIC, checkpoint, contents, fill


class GatedLocation(BackupLocation):
    """A real file:// location whose uploads wait for a gate: an upload held in flight."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, "job-1")
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.running = 0
        self.most_running = 0

    def upload(self, stage: Path, **kwargs: Any) -> Any:
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        self.entered.set()
        try:
            assert self.gate.wait(30)
            return super().upload(stage, **kwargs)
        finally:
            self.running -= 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_checkpoint(tmp_path: Path, n: int, offset: int) -> tuple[Path, dict[bytes, bytes]]:
    """``<tmp>/counts/partition-0.checkpoint`` holding ``n`` keys, as a commit leaves it."""
    ckpt = tmp_path / "counts" / "partition-0.checkpoint"
    shutil.rmtree(ckpt, ignore_errors=True)
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    engine = RocksDbEngine(tmp_path / f"db-{n}")
    try:
        fill(engine, 0, n, tag=f"n{n}-")
        checkpoint(engine, ckpt, offset)
        return ckpt, dict(engine.all())
    finally:
        engine.close()


def test_the_upload_is_staged_and_limited(tmp_path: Path) -> None:
    loc = GatedLocation(f"file://{tmp_path / 'remote'}")
    clock = Clock()
    up = BackupUploader(loc, interval_s=10, retain=3, clock=clock)
    try:
        ckpt, first = make_checkpoint(tmp_path, 300, 299)
        assert up.offer("counts", TOPIC, 0, ckpt, 299)
        assert loc.entered.wait(10)
        # the next commits replace the checkpoint while the upload is in flight: the newest
        # due one is staged to follow it, an older staged one is dropped
        for n in (600, 900):
            ckpt, last = make_checkpoint(tmp_path, n, n - 1)
            clock.now += 60
            assert up.offer("counts", TOPIC, 0, ckpt, n - 1)
        clock.now += 60
        assert not up.offer("counts", TOPIC, 0, ckpt, 899), "already queued"
        assert len(list((tmp_path / "counts").glob("partition-0.backup-*"))) == 2
        loc.gate.set()
        assert up.wait_idle(30)
        assert loc.most_running == 1, "one upload in flight at most"
        assert not list((tmp_path / "counts").glob("partition-0.backup-*")), "staging removed"
        refs = loc.snapshots("counts", 0)
        assert [r.offset for r in refs] == [899, 299]
        for ref, state in zip(refs, (last, first), strict=True):
            loc.fetch(ref, tmp_path / ref.id)
            assert contents(tmp_path / ref.id) == state, "the staged copies were uploaded"
        assert not up.offer("counts", TOPIC, 0, tmp_path / "gone.checkpoint", 1199)
        clock.now += 60
        assert not up.offer("counts", TOPIC, 0, ckpt, 899), "that offset is uploaded"
        ckpt, _ = make_checkpoint(tmp_path, 1200, 1199)
        assert up.offer("counts", TOPIC, 0, ckpt, 1199)
        assert up.wait_idle(30)
        clock.now += 5
        ckpt, _ = make_checkpoint(tmp_path, 1500, 1499)
        assert not up.due("counts", 0) and up.due("counts", 1)  # (partition 1: never staged)
        assert not up.offer("counts", TOPIC, 0, ckpt, 1499), "interval not passed yet"
        clock.now += 5
        assert up.due("counts", 0)  # a commit now takes a local checkpoint to offer
        assert up.offer("counts", TOPIC, 0, ckpt, 1499)
        assert up.wait_idle(30)
        assert [r.offset for r in loc.snapshots("counts", 0)] == [1499, 1199, 899]
        assert up.status[("counts", 0)].uploads == 4
    finally:
        loc.gate.set()
        up.close(10)


def test_an_unreachable_store_makes_backups_fall_behind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A real s3fs client against a port nobody listens on: the upload fails, the caller
    is not affected, a warning says backups fall behind, the next offer tries again."""
    opts = {"key": "k", "secret": "s",
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{free_port()}",
                              "region_name": "us-east-1"}}
    loc = BackupLocation("s3://bucket/prefix", "job-1", opts)
    clock = Clock()
    up = BackupUploader(loc, interval_s=1, retain=3, clock=clock)
    ckpt, _ = make_checkpoint(tmp_path, 100, 99)
    try:
        with caplog.at_level(logging.WARNING, logger="millpond.backup"):
            assert up.offer("counts", TOPIC, 0, ckpt, 99)
            assert up.wait_idle(120)
            status = up.status[("counts", 0)]
            assert (status.uploads, status.failures) == (0, 1)
            clock.now += 1
            assert up.offer("counts", TOPIC, 0, ckpt, 99), "retried after the interval"
            assert up.wait_idle(120)
        assert status.failures == 2
        assert "backups are falling behind (no snapshot uploaded yet)" in caplog.text
        assert not list((tmp_path / "counts").glob("partition-0.backup-*"))
    finally:
        up.close(10)


def test_backups_resume_when_the_s3_server_returns(s3: Any, tmp_path: Path) -> None:
    """The real S3 server stopped, then started again: failures, then a snapshot."""
    loc = BackupLocation(s3.uri("resume"), "job-1", s3.options)
    clock = Clock()
    up = BackupUploader(loc, interval_s=1, retain=3, clock=clock)
    ckpt, state = make_checkpoint(tmp_path, 200, 199)
    try:
        s3.server.stop()
        try:
            assert up.offer("counts", TOPIC, 0, ckpt, 199)
            assert up.wait_idle(120)
            assert up.status[("counts", 0)].failures == 1
        finally:
            s3.server.start(timeout=90)
        clock.now += 1
        assert up.offer("counts", TOPIC, 0, ckpt, 199)
        assert up.wait_idle(120)
        assert up.status[("counts", 0)].uploads == 1
        refs = loc.snapshots("counts", 0)
        assert [r.offset for r in refs] == [199]
        loc.fetch(refs[0], tmp_path / "restored")
        assert contents(tmp_path / "restored") == state
    finally:
        up.close(10)

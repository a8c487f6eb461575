"""Snapshots in a backup location, against file:// and a real S3 server through s3://:
upload only what the remote lacks, manifests written last, retention, verified download."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from millpond.backup import BackupLocation, SnapshotCorruptError
from millpond.backup.manifest import MANIFEST, sha256_file
from millpond.stores import RocksDbEngine
from tests.backup.helpers import TOPIC, checkpoint, contents, fill


def sst_names(loc: BackupLocation) -> set[str]:
    return {e["name"].rsplit("/", 1)[-1] for e in loc._ls(f"{loc.partition_root('counts', 0)}/sst")}


def cli_config(tmp_path: Path, s3: Any, job: str, prefix: str,
               overrides: dict[str, str] | None = None) -> Path:
    """A job config whose ``counts`` store is backed up under ``prefix`` on the S3 server
    (``overrides`` last), for the `millpond backup` commands."""
    from tests.kafka_util import write_properties

    return write_properties(tmp_path / "job.properties", {
        "job.name": job, "stores.counts.factory": "rocksdb",
        "stores.counts.key.serde": "string", "stores.counts.msg.serde": "json",
        "stores.counts.changelog": f"kafka.{job}-counts-changelog", **s3.properties(prefix),
        **(overrides or {})})


def test_incremental_upload_and_verified_download(
    make_location: Callable[..., BackupLocation], tmp_path: Path,
) -> None:
    loc = make_location()
    engine = RocksDbEngine(tmp_path / "db")
    try:
        fill(engine, 0, 2000)
        first = loc.upload(checkpoint(engine, tmp_path / "c1", 1999), store="counts",
                           topic=TOPIC, partition=0, offset=1999)
        ssts1 = sst_names(loc)
        assert len(ssts1) == 1 and {f.name for f in first.files} >= {"CURRENT", "OFFSET"}
        for f in first.files:  # every file is listed with its local size and checksum
            assert f.size == (tmp_path / "c1" / f.name).stat().st_size
            assert f.sha256 == sha256_file(tmp_path / "c1" / f.name)
        fill(engine, 2000, 1000, tag="w")
        second = loc.upload(checkpoint(engine, tmp_path / "c2", 2999), store="counts",
                            topic=TOPIC, partition=0, offset=2999)
        ssts2 = sst_names(loc)
        # the first SST is shared: only the new one was uploaded
        assert ssts1 < ssts2 and len(ssts2) == 2
        shared = {f.path for f in first.files if f.path.startswith("sst/")}
        assert shared <= {f.path for f in second.files}
        expected = dict(engine.all())
    finally:
        engine.close()

    refs = loc.snapshots("counts", 0)
    assert [(r.id, r.offset) for r in refs] == [(second.id, 2999), (first.id, 1999)]
    assert refs[0].bytes == second.size > 0
    size = loc.fetch(refs[0], tmp_path / "restored")
    assert size == second.size
    assert contents(tmp_path / "restored") == expected
    assert loc.verify(second) == []


def test_a_snapshot_without_manifest_is_not_listed(
    make_location: Callable[..., BackupLocation], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    loc = make_location()
    engine = RocksDbEngine(tmp_path / "db")
    try:
        fill(engine, 0, 500)
        m = loc.upload(checkpoint(engine, tmp_path / "c1", 499), store="counts", topic=TOPIC,
                       partition=0, offset=499)
    finally:
        engine.close()
    root = loc.partition_root("counts", 0)
    # an interrupted upload: small files there, the manifest never written
    loc.put_bytes(f"{root}/snapshots/00000000000000009999-0000000000000/CURRENT", b"x")
    # a garbled manifest
    loc.put_bytes(f"{root}/snapshots/00000000000000009998-0000000000000/{MANIFEST}", b"{")
    with caplog.at_level(logging.WARNING):
        assert [r.id for r in loc.snapshots("counts", 0)] == [m.id]
    assert "not a snapshot manifest" in caplog.text
    assert len(loc.snapshot_ids("counts", 0)) == 3


def test_retention_keeps_the_newest_and_their_ssts(
    make_location: Callable[..., BackupLocation], tmp_path: Path,
) -> None:
    loc = make_location()
    engine = RocksDbEngine(tmp_path / "db")
    manifests = []
    try:
        for i in range(4):
            fill(engine, i * 500, 500, tag=f"r{i}")
            if i == 2:
                engine.compact()  # the SSTs so far merge: the old ones are referenced no more
            manifests.append(loc.upload(checkpoint(engine, tmp_path / f"c{i}", i * 500 + 499),
                                        store="counts", topic=TOPIC, partition=0,
                                        offset=i * 500 + 499))
            deleted, _ = loc.prune("counts", 0, retain=2, newest_id=manifests[-1].id)
            assert len(deleted) == (1 if i >= 2 else 0)  # one more than retain: the oldest
        expected = dict(engine.all())
    finally:
        engine.close()
    kept = loc.manifests("counts", 0)
    assert [m.id for m in kept] == [manifests[3].id, manifests[2].id]
    referenced = {f.path.rsplit("/", 1)[-1] for m in kept for f in m.files
                  if f.path.startswith("sst/")}
    assert sst_names(loc) == referenced  # nothing unreferenced, nothing missing
    early = {f.path.rsplit("/", 1)[-1] for f in manifests[0].files if f.path.startswith("sst/")}
    assert early and not early & referenced  # compaction made them garbage: they are gone
    loc.fetch(kept[0].ref(), tmp_path / "restored")
    assert contents(tmp_path / "restored") == expected


def test_a_prune_racing_another_one_is_no_failure(
    make_location: Callable[..., BackupLocation], tmp_path: Path,
) -> None:
    """Two processes prune one store partition (after a rebalance the previous owner may
    still be uploading): files the other one deleted between listing and deleting are no
    error, the result is the same."""
    loc, other = make_location(), make_location()
    engine = RocksDbEngine(tmp_path / "db")
    try:
        for i in range(3):
            fill(engine, i * 300, 300, tag=f"p{i}")
            engine.compact()  # each snapshot's SSTs replace the previous ones'
            newest = loc.upload(checkpoint(engine, tmp_path / f"c{i}", i * 300 + 299),
                                store="counts", topic=TOPIC, partition=0, offset=i * 300 + 299)
    finally:
        engine.close()

    class Racing:
        """``loc.fs`` whose deletes find the other process was first."""

        def __init__(self, fs: Any) -> None:
            self._fs = fs

        def __getattr__(self, name: str) -> Any:
            return getattr(self._fs, name)

        def rm_file(self, path: str) -> None:
            other.fs.rm_file(path)
            self._fs.rm_file(path)

        def rm(self, path: str, recursive: bool = False) -> None:
            other.fs.rm(path, recursive=recursive)
            self._fs.rm(path, recursive=recursive)

    loc.fs = Racing(loc.fs)
    deleted, dropped = loc.prune("counts", 0, retain=1, newest_id=newest.id)
    assert len(deleted) == 2 and dropped
    assert [m.id for m in other.manifests("counts", 0)] == [newest.id]
    assert sst_names(other) == {f.path.rsplit("/", 1)[-1] for f in newest.files
                                if f.path.startswith("sst/")}


def test_a_corrupt_sst_fails_verification_and_leaves_nothing(
    make_location: Callable[..., BackupLocation], tmp_path: Path,
) -> None:
    loc = make_location()
    engine = RocksDbEngine(tmp_path / "db")
    try:
        fill(engine, 0, 1000)
        m = loc.upload(checkpoint(engine, tmp_path / "c1", 999), store="counts", topic=TOPIC,
                       partition=0, offset=999)
    finally:
        engine.close()
    sst = next(f for f in m.files if f.path.startswith("sst/"))
    remote = f"{loc.partition_root('counts', 0)}/{sst.path}"
    data = bytearray(loc.fs.cat_file(remote))
    data[len(data) // 2] ^= 0xFF  # same size, one flipped byte
    loc.put_bytes(remote, bytes(data))
    with pytest.raises(SnapshotCorruptError, match="SHA-256"):
        loc.fetch(m.ref(), tmp_path / "restored")
    assert not (tmp_path / "restored").exists()
    assert not (tmp_path / "restored.download").exists()
    assert loc.verify(m) == [f"{sst.path}: SHA-256 mismatch"]
    loc.fs.rm_file(remote)
    with pytest.raises(SnapshotCorruptError, match="missing"):
        loc.fetch(m.ref(), tmp_path / "restored")


def test_s3_options_reach_the_filesystem(s3: Any) -> None:
    """Options from job.state.backup.options.* (nested) configure s3fs; a wrong secret is
    refused by the real server, which a listing surfaces as an error."""
    from millpond.config import Config, parse_properties

    props = "\n".join(f"{k}={v}" for k, v in s3.properties("opts").items())
    config = Config(parse_properties("job.name=j\n" + props))
    loc = BackupLocation.from_config(config)
    assert loc.snapshots("counts", 0) == []
    assert loc.root == f"{s3.bucket}/opts/j-1"
    bad = parse_properties("job.name=j\n" + props + "\njob.state.backup.options.secret=nope")
    with pytest.raises(PermissionError):
        BackupLocation.from_config(Config(bad)).snapshots("counts", 0)


def test_backup_list_and_verify_commands(s3: Any, tmp_path: Path) -> None:
    """`millpond backup list|verify` on a real S3 server: a sound snapshot, then a bad one."""
    from tests.kafka_util import millpond

    config = cli_config(tmp_path, s3, "cli", "cli")
    from millpond.config import Config

    loc = BackupLocation.from_config(Config.load(config))
    engine = RocksDbEngine(tmp_path / "db")
    try:
        fill(engine, 0, 300)
        m = loc.upload(checkpoint(engine, tmp_path / "c1", 299), store="counts", topic=TOPIC,
                       partition=0, offset=299)
    finally:
        engine.close()
    listed = millpond("backup", "list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    assert m.id in listed.stdout and f" {m.size} " in listed.stdout
    ok = millpond("backup", "verify", "--config", str(config))
    assert ok.returncode == 0 and f"snapshot {m.id} (offset 299): ok" in ok.stdout, ok.stderr
    sst = next(f for f in m.files if f.path.startswith("sst/"))
    loc.fs.rm_file(f"{loc.partition_root('counts', 0)}/{sst.path}")
    bad = millpond("backup", "verify", "--config", str(config))
    assert bad.returncode == 1 and f"BAD: {sst.path}: missing" in bad.stdout


def test_a_missing_bucket_is_an_error_not_an_empty_location(s3: Any, tmp_path: Path) -> None:
    """A prefix nothing was uploaded to yet lists as no snapshots; a bucket that does not
    exist (a typo, a bucket never created) is an error naming it, in the listing recovery
    uses and in `millpond backup list`, not "no snapshots yet"."""
    from millpond.backup import BackupUnavailableError
    from tests.kafka_util import millpond

    assert BackupLocation(s3.uri("never-written"), "j-1", s3.options).snapshots("counts", 0) == []
    missing = BackupLocation("s3://no-such-bucket/x", "j-1", s3.options)
    with pytest.raises(BackupUnavailableError, match="bucket 'no-such-bucket' does not exist"):
        missing.snapshots("counts", 0)
    config = cli_config(tmp_path, s3, "j", "x", {"job.state.backup.uri": "s3://no-such-bucket/x"})
    listed = millpond("backup", "list", "--config", str(config))
    assert listed.returncode == 2, listed.stdout + listed.stderr
    assert "bucket 'no-such-bucket' does not exist" in listed.stderr
    assert "Traceback" not in listed.stderr


def test_backup_commands_name_an_unreachable_endpoint(s3: Any, tmp_path: Path) -> None:
    """`millpond backup list|verify` against an endpoint nothing listens on: exit 1 with one
    line naming the URI and the cause, no traceback."""
    from millpond.dev.kafka import free_port
    from tests.kafka_util import millpond

    closed = f"http://127.0.0.1:{free_port()}"
    config = cli_config(tmp_path, s3, "j", "x",
                        {"job.state.backup.options.client_kwargs.endpoint_url": closed})
    for command in ("list", "verify"):
        out = millpond("backup", command, "--config", str(config))
        assert out.returncode == 1, out.stdout + out.stderr
        assert f"Error: cannot read the backup URI {s3.uri('x')}: " \
               "EndpointConnectionError" in out.stderr, out.stderr
        assert closed in out.stderr and "Traceback" not in out.stderr, out.stderr

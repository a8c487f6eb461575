"""State backups under faults (issue #18), against the real broker and a real S3 server
(S3Proxy through ``s3://`` and s3fs): a SIGKILL in the middle of an upload, a corrupted
SST in the bucket, the S3 server stopped for 10 s mid-run, a snapshot newer than the
checkpoint under effectively-once, and a backup URI unreachable at start. Each ends with
every key's count equal to the reference, and checks the behaviour the fault calls for.

They live in tests/faults (`make test-faults`, which has the time for them), not in
tests/backup (`make test`): each runs a job several times.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from millpond.backup import BackupLocation
from millpond.changelog.checkpoint import Checkpoint, checkpoint_topic
from millpond.config import Config
from millpond.ops.offline import Job
from tests.conftest import S3, running_s3
from tests.kafka_util import (
    MILLPOND,
    REPO,
    OutputLines,
    checkpoint_history,
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    ready_lines,
    run_job,
    state_diff,
    write_properties,
)

pytestmark = pytest.mark.kafka

STORE = "counts"


# ---- helpers ---------------------------------------------------------------------------------

def backup_job(bootstrap: str, job: str, source: str, state: Path, backup: dict[str, str],
               **extra: Any) -> dict[str, Any]:
    """A counting job whose store is backed up as often as it commits (interval 0)."""
    return counting_job(bootstrap, job, source, state, **{
        "task.class": "tests.jobs.counting.SlowCounter",
        "task.commit.ms": 200,
        "stores.counts.object.cache.size": 0,  # a changelog record (and SST data) per update
        "job.state.backup.interval.ms": 0,
        **backup, **extra})


def new_job(bootstrap: str, topic_name: Callable[[str], str],
            tmp_path: Path) -> tuple[str, str, Path]:
    """A test's input topic (1 partition, created), its job name and its state dir."""
    source, job = topic_name("in"), topic_name("job")
    create_topic(bootstrap, source, 1)
    return source, job, tmp_path / "state"


def location(config: Path) -> BackupLocation:
    return BackupLocation.from_config(Config.load(config))


def checkpointed(config: Path) -> Checkpoint:
    """Task partition-0's checkpoint."""
    return Job(Config.load(config)).checkpoints()["partition-0"]


def exact(config: Path, expected: Counter[str]) -> tuple[int, int]:
    """(lost, duplicated) of the counts store against the reference, and every key's
    count equal to it."""
    state = dump_store(config, STORE)
    lost, duplicated = state_diff(state, expected)
    assert (lost, duplicated) == (0, 0) and state == dict(expected), (lost, duplicated)
    return lost, duplicated


def wait_until(what: str, ok: Callable[[], Any], timeout: float, proc: Any = None,
               log: Callable[[], str] = lambda: "") -> Any:
    """Poll ``ok()`` until it is truthy (bounded); fails naming ``what``. A process that
    ended meanwhile fails it at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = ok()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the job ended first\n{log()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s\n{log()[-3000:]}")


class SlowProxy:
    """A TCP forwarder in front of the S3 server that passes what clients send at
    ``rate`` bytes/s (answers at full speed): uploads through it take seconds, so a test
    can act while one is in flight. Real sockets both ways; the server is the real one."""

    def __init__(self, target_port: int, rate: float) -> None:
        self.target_port, self.rate = target_port, rate
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                continue
            server.settimeout(None)
            self.sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, slow: bool) -> None:
        try:
            while chunk := src.recv(1024 if slow else 65536):
                if slow:
                    time.sleep(len(chunk) / self.rate)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        for s in self.sockets:
            s.close()


@pytest.fixture
def private_s3(tmp_path: Path) -> Iterator[S3]:
    """An S3 server of this test alone (it is stopped and restarted), with one bucket."""
    with running_s3(tmp_path / "s3", "private-backups") as server:
        yield server


def start(config: Path, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`millpond run` (unbounded) with its output in ``log``."""
    with open(log, "wb") as fh:
        return subprocess.Popen([MILLPOND, "run", "--config", str(config)], cwd=REPO,
                                stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", **env})


# ---- 1. SIGKILL during an upload ---------------------------------------------------------------

def test_sigkill_during_an_upload_leaves_a_snapshot_never_used(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path, s3: S3,
) -> None:
    """Uploads go through a proxy passing 8 KB/s; the job is SIGKILLed once one snapshot is
    complete and the next one's directory holds files but no ``snapshot.json`` yet. That
    half-written snapshot is not listed, not verified, not restored by `restore
    --from-backup` nor by a restart on an empty state dir (both take the complete one),
    a later upload prunes it, and the state is exact."""
    source, job, state = new_job(kafka_bootstrap, topic_name, tmp_path)
    direct = s3.properties(job)
    slow = SlowProxy(s3.server.port, rate=8_000)
    try:
        conf = write_properties(tmp_path / "job.properties",
                                backup_job(kafka_bootstrap, job, source, state, direct))
        through_proxy = {**direct,
                         "job.state.backup.options.client_kwargs.endpoint_url": slow.endpoint}
        slow_conf = write_properties(tmp_path / "slow.properties", backup_job(
            kafka_bootstrap, job, source, state, through_proxy))
        loc = location(conf)  # straight to the server
        expected = produce_users(kafka_bootstrap, source, 30_000, 3_000, 1)
        log = tmp_path / "killed.log"
        proc = start(slow_conf, log, {"MILLPOND_TEST_DELAY": "0.0005"})

        def half_written() -> tuple[str, str] | None:
            complete = loc.manifests(STORE, 0)
            if not complete:
                return None
            partial = [sid for sid in loc.snapshot_ids(STORE, 0)
                       if sid > complete[0].id and loc.manifest(STORE, 0, sid) is None]
            return (complete[0].id, partial[0]) if partial else None

        try:
            complete_id, partial_id = wait_until(
                "a complete snapshot, then a newer one half written", half_written, 120,
                proc, lambda: log.read_text(errors="replace"))
        finally:
            proc.kill()  # SIGKILL, in the middle of the upload
            proc.wait(30)
    finally:
        slow.close()

    root = loc.partition_root(STORE, 0)
    partial_files = loc._ls(f"{root}/snapshots/{partial_id}")
    assert partial_files and loc.manifest(STORE, 0, partial_id) is None, partial_files
    assert [m.id for m in loc.manifests(STORE, 0)][0] == complete_id

    listed = millpond("backup", "list", "--config", str(conf))
    assert listed.returncode == 0, listed.stderr
    assert complete_id in listed.stdout and partial_id not in listed.stdout, listed.stdout
    verified = millpond("backup", "verify", "--config", str(conf))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert partial_id not in verified.stdout

    restored = millpond("restore", "--from-backup", "--config", str(conf))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert f"after snapshot {complete_id}" in restored.stdout, restored.stdout

    shutil.rmtree(state)  # and a restart on an empty state dir
    run = run_job(conf, "--bounded", timeout=180)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert f"downloaded snapshot {complete_id}" in out, out[-3000:]
    assert partial_id not in out
    lost, dup = exact(conf, expected)
    # the restart's uploads pruned the interrupted one (older than their snapshots)
    assert partial_id not in loc.snapshot_ids(STORE, 0)
    report("backups: SIGKILL during an upload (CI)",
           "30,000 msgs; killed with a snapshot's files but not its manifest in S3; "
           "backup list/verify, restore --from-backup, restart on an empty state dir",
           lost, dup, "half-written snapshot never listed or used (older complete one "
           "restored), pruned later; exact")


# ---- 2. a corrupted SST in the bucket ----------------------------------------------------------

def test_a_corrupted_sst_in_the_bucket_is_skipped_for_an_older_snapshot(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path, s3: S3,
) -> None:
    """Bytes of an SST only the newest snapshot has are overwritten in the bucket (same
    size): `backup verify` names it, and a restart on an empty state dir skips that
    snapshot with a warning naming it and starts from the next older one; exact state."""
    source, job, state = new_job(kafka_bootstrap, topic_name, tmp_path)
    conf = write_properties(tmp_path / "job.properties", backup_job(
        kafka_bootstrap, job, source, state, s3.properties(job)))
    loc = location(conf)
    expected = produce_users(kafka_bootstrap, source, 20_000, 3_000, 1)
    first = run_job(conf, "--bounded", timeout=120, env={"MILLPOND_TEST_DELAY": "0.0002"})
    assert first.returncode == 0, first.stderr[-3000:]
    snaps = loc.manifests(STORE, 0)
    assert len(snaps) >= 2, [m.id for m in snaps]
    newest, older = snaps[0], snaps[1]
    shared = {f.path for f in older.files}
    victim = next((f for f in newest.files
                   if f.path.startswith("sst/") and f.path not in shared), None)
    assert victim is not None, "the newest snapshot has no SST of its own"
    path = f"{loc.partition_root(STORE, 0)}/{victim.path}"
    data = loc.fs.cat_file(path)
    loc.fs.pipe_file(path, bytes(b ^ 0xFF for b in data[:4096]) + data[4096:])

    verified = millpond("backup", "verify", "--config", str(conf))
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert f"snapshot {newest.id} (offset {newest.offset}): BAD: {victim.path}: SHA-256 " \
           "mismatch" in verified.stdout, verified.stdout

    expected += produce_users(kafka_bootstrap, source, 2_000, 3_000, 1)
    shutil.rmtree(state)  # the machine is lost
    run = run_job(conf, "--bounded", timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert (f"snapshot {newest.id} of store counts partition 0 cannot be used "
            f"(SnapshotCorruptError") in out and "fails its SHA-256 check" in out, out[-3000:]
    assert f"downloaded snapshot {older.id}" in out, out[-3000:]
    assert f"downloaded snapshot {newest.id}" not in out
    lost, dup = exact(conf, expected)
    report("backups: SST corrupted in the bucket (CI)",
           "22,000 msgs; 4 KB of an SST of the newest snapshot flipped; state dir lost",
           lost, dup, "`backup verify` names it; restore skipped it with a warning, used the "
           "next older snapshot; exact")


# ---- 3. the S3 server stopped for 10 s mid-run ------------------------------------------------

def test_s3_server_stopped_for_10s_mid_run(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path, private_s3: S3,
) -> None:
    """The S3 server is stopped for 10 s while the job runs: the job keeps processing
    (committed input offsets advance during the outage), warns that backups fall behind,
    uploads again once the server is back, stops cleanly, and the state is exact."""
    source, job, state = new_job(kafka_bootstrap, topic_name, tmp_path)
    conf = write_properties(tmp_path / "job.properties", backup_job(
        kafka_bootstrap, job, source, state, private_s3.properties(job)))
    loc = location(conf)
    expected = produce_users(kafka_bootstrap, source, 100_000, 3_000, 1)

    def committed() -> int:
        history = checkpoint_history(kafka_bootstrap, job)
        return history["partition-0"][-1][source] if history.get("partition-0") else 0

    log = tmp_path / "run.log"
    proc = subprocess.Popen([MILLPOND, "run", "--config", str(conf)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1",
                                 "MILLPOND_TEST_DELAY": "0.0005"})
    lines = OutputLines(proc)
    server = private_s3.server
    try:
        before = wait_until("a first snapshot", lambda: loc.snapshots(STORE, 0), 90, proc,
                            lambda: "".join(lines.lines))[0]
        server.stop()
        stopped = time.monotonic()
        at_stop = committed()
        while time.monotonic() - stopped < 10:
            assert proc.poll() is None, "".join(lines.lines)[-3000:]
            time.sleep(0.5)
        during = committed()
        assert proc.poll() is None
        server.start(timeout=90)
        restarted_ms = int(time.time() * 1000)
        after = wait_until("a snapshot uploaded after the restart",
                           lambda: [s for s in loc.snapshots(STORE, 0)
                                    if s.created_ms >= restarted_ms], 60, proc,
                           lambda: "".join(lines.lines))[0]
        proc.terminate()  # a clean stop
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    out = lines.text()
    log.write_text(out)
    assert rc == 0, out[-3000:]
    assert during > at_stop, f"no input committed during the outage ({at_stop} -> {during})"
    assert f"backup of counts partition 0 to {loc.uri} failed" in out, out[-3000:]
    assert "backups are falling behind" in out
    assert after.offset > before.offset
    final = run_job(conf, "--bounded", timeout=180)
    assert final.returncode == 0, final.stderr[-3000:]
    lost, dup = exact(conf, expected)
    report("backups: S3 server stopped 10 s mid-run (CI)",
           f"100,000 msgs; input committed during the outage {at_stop:,} -> {during:,}",
           lost, dup, "job kept processing, warned, uploaded again after the restart; exact")


# ---- 4. a snapshot newer than the checkpoint (effectively-once) ------------------------------

def test_a_snapshot_newer_than_the_checkpoint_is_not_used(
    report: Callable[..., None], kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path, s3: S3,
) -> None:
    """Under effectively-once a store is restored to its task's checkpointed changelog
    offset. The checkpoint is rolled back (an older checkpoint record written again) below
    the snapshots a later run uploaded: on an empty state dir those snapshots are skipped,
    each with the reason, the newest one not beyond the checkpoint is used, the input
    after the checkpoint is processed again, and the state is exact."""
    source, job, state = new_job(kafka_bootstrap, topic_name, tmp_path)
    conf = write_properties(tmp_path / "job.properties", backup_job(
        kafka_bootstrap, job, source, state, s3.properties(job),
        **{"task.processing.guarantee": "effectively-once", "job.state.backup.retain": 100}))
    loc = location(conf)
    env = {"MILLPOND_TEST_DELAY": "0.0003"}
    expected = produce_users(kafka_bootstrap, source, 6_000, 2_000, 1)
    first = run_job(conf, "--bounded", timeout=120, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    old = checkpointed(conf)
    target = old.changelogs[STORE]
    expected += produce_users(kafka_bootstrap, source, 6_000, 2_000, 1)
    second = run_job(conf, "--bounded", timeout=120, env=env)
    assert second.returncode == 0, second.stderr[-3000:]
    snaps = loc.snapshots(STORE, 0)
    newer = [s for s in snaps if s.offset > target]
    usable = [s for s in snaps if s.offset <= target]
    assert newer and usable, (target, [(s.id, s.offset) for s in snaps])

    # roll the checkpoint back to the first run's
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(checkpoint_topic(job, "1"), old.to_bytes(), old.task.encode(), 0)
    assert producer.flush(30) == 0
    assert checkpointed(conf) == old

    shutil.rmtree(state)
    run = run_job(conf, "--bounded", timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    for s in newer:
        assert (f"snapshot {s.id} of store counts partition 0 is at changelog offset "
                f"{s.offset}, beyond the restore target {target}; not used") in out, out[-3000:]
        assert f"downloaded snapshot {s.id}" not in out
    assert f"downloaded snapshot {usable[0].id}" in out, out[-3000:]
    [(_, _, inputs)] = ready_lines(out)
    assert inputs == old.inputs, "it resumed at the rolled-back checkpoint"
    lost, dup = exact(conf, expected)
    report("backups: snapshot newer than the checkpoint (effectively-once, CI)",
           f"12,000 msgs; checkpoint rolled back below {len(newer)} snapshots; state dir lost",
           lost, dup, "newer snapshots not used (warning says why), the newest not beyond "
           "the checkpoint used, input after it reprocessed; exact")


# ---- 5. the backup URI unreachable at start ----------------------------------------------------

@pytest.mark.parametrize("fault", ["closed port", "missing bucket"])
def test_backup_uri_unreachable_at_start(
    fault: str, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path, s3: S3,
) -> None:
    """A job whose state dir is lost starts with a backup URI it cannot use (an endpoint
    nothing listens on, or a bucket that does not exist): a warning says why the backups
    could not be listed, the store is restored from the changelog, uploads fail with
    warnings, the job finishes and the state is exact."""
    from millpond.dev.kafka import free_port

    source, job, state = new_job(kafka_bootstrap, topic_name, tmp_path)
    good = s3.properties(job)
    if fault == "closed port":
        bad = {**good, "job.state.backup.options.client_kwargs.endpoint_url":
               f"http://127.0.0.1:{free_port()}"}
        why = "EndpointConnectionError"
    else:
        bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
        bad = {**good, "job.state.backup.uri": f"s3://{bucket}/{job}"}
        why = f"bucket '{bucket}' does not exist"
    conf = write_properties(tmp_path / "job.properties",
                            backup_job(kafka_bootstrap, job, source, state, bad))
    expected = produce_users(kafka_bootstrap, source, 5_000, 1_000, 1)
    first = run_job(conf, "--bounded", "--config-override",
                    "stores.counts.backup.enabled=false", timeout=120)
    assert first.returncode == 0, first.stderr[-3000:]
    expected += produce_users(kafka_bootstrap, source, 1_000, 1_000, 1)
    shutil.rmtree(state)

    began = time.monotonic()
    run = run_job(conf, "--bounded", timeout=120)
    took = time.monotonic() - began
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "backups of store counts partition 0 could not be listed (" in out, out[-3000:]
    assert "; restoring from the changelog" in out and why in out, out[-3000:]
    assert "backup of counts partition 0 to " in out and "backups are falling behind" in out
    assert "downloaded snapshot" not in out
    [(_, restored, _)] = ready_lines(out)
    assert restored > 0, "the changelog was replayed"
    lost, dup = exact(conf, expected)
    report(f"backups: URI unreachable at start, {fault} (CI)",
           f"6,000 msgs; state dir lost; run took {took:.0f} s", lost, dup,
           "warning names the cause; restored from the changelog; uploads fail with "
           "warnings; exact")

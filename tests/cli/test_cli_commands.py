"""The README's CLI commands, run as a user runs them: the installed ``millpond`` console script
as a subprocess against the real broker, each checked by its effect on the job's state.

``checkpoint set`` (a rerun resumes there; refused while the job runs), ``changelog
describe``, ``store get|range|dump --raw``, ``restore --store``, ``--partition`` and
``--full`` (progress bar and rate table). ``spark rebuild|audit`` from the command line are in
``tests/spark/test_cli.py``; ``dev kafka`` in ``tests/cli/test_cli_dev.py``.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.jobs.two_stores import encode
from tests.kafka_util import (
    MILLPOND,
    REPO,
    counting_job,
    create_topic,
    dump_store,
    hash_partition,
    millpond,
    produce_users,
    read_topic,
    run_job,
    start_job,
    wait_for_line,
    write_properties,
)

pytestmark = pytest.mark.kafka

TIMEOUT = 30


@dataclass
class Job:
    """A counting job that ran to the end of its input once."""

    conf: Path
    name: str
    source: str
    partitions: int
    expected: Counter[str]

    @property
    def changelog(self) -> str:
        return f"{self.name}-counts-changelog"

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``millpond <args> --config <job>``, asserted to succeed."""
        out = millpond(*args, "--config", str(self.conf))
        assert out.returncode == 0, out.stdout + out.stderr
        return out

    def by_partition(self) -> dict[int, dict[str, int]]:
        state: dict[int, dict[str, int]] = defaultdict(dict)
        for user, n in self.expected.items():
            state[hash_partition(user, self.partitions)][user] = n
        return dict(state)


def _counting(bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
              partitions: int = 2, n: int = 1000, users: int = 60) -> Job:
    source, name = topic_name("in"), topic_name("job")
    create_topic(bootstrap, source, partitions)
    expected = produce_users(bootstrap, source, n, users, partitions)
    props = counting_job(bootstrap, name, source, tmp_path / "state")
    # Dynamic membership: a stopped process leaves the group at once, as `checkpoint set`
    # requires (a static member stays a member until its session times out).
    del props["systems.kafka.consumer.group.instance.id"]
    conf = write_properties(tmp_path / "job.properties", props)
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    return Job(conf, name, source, partitions, expected)


def _checkpoints(job: Job) -> dict[str, Any]:
    return dict(json.loads(job.cli("checkpoint", "show", "--format", "json").stdout))


def _rows(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def _changelog_partitions(bootstrap: str, topic: str) -> dict[int, dict[str, int]]:
    """Per partition of a changelog (read_committed): data records, key+value bytes, last
    offset."""
    stats: dict[int, dict[str, int]] = defaultdict(lambda: {"records": 0, "bytes": 0, "last": -1})
    for msg in read_topic(bootstrap, topic):
        s = stats[msg.partition()]
        s["records"] += 1
        s["bytes"] += len(msg.key() or b"") + len(msg.value() or b"")
        s["last"] = max(s["last"], msg.offset())
    return dict(stats)


def test_checkpoint_set_moves_where_the_job_resumes(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    job = _counting(kafka_bootstrap, topic_name, tmp_path, partitions=1, n=300, users=20)
    before = _checkpoints(job)["partition-0"]
    assert before["inputs"] == {job.source: 300}

    # Refused while a process of the job runs (README: "# job stopped").
    live = start_job(job.conf)
    try:
        wait_for_line(live, "ready")
        refused = millpond("checkpoint", "set", "--config", str(job.conf), "--partition", "0",
                           "--offset", f"{job.source}=0")
        assert refused.returncode == 2
        assert "stop every process before setting checkpoints" in refused.stderr, refused.stderr
        live.send_signal(signal.SIGTERM)
        out, _ = live.communicate(timeout=60)
        assert live.returncode == 0, out[-3000:]
    finally:
        if live.poll() is None:
            live.kill()
    assert _checkpoints(job)["partition-0"]["inputs"] == {job.source: 300}

    produce_users(kafka_bootstrap, job.source, 100, 20, 1)  # offsets 300..399
    skipped_to = 350
    out = job.cli("checkpoint", "set", "--partition", "0",
                  "--offset", f"{job.source}={skipped_to}")
    written = json.loads(out.stdout)
    assert written["inputs"] == {job.source: skipped_to}
    assert written["changelogs"] == before["changelogs"]  # the stores' offsets are kept
    assert _checkpoints(job)["partition-0"]["inputs"] == {job.source: skipped_to}

    run = run_job(job.conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    resumed = Counter(json.loads(m.value())["user_id"]
                      for m in read_topic(kafka_bootstrap, job.source) if m.offset() >= skipped_to)
    assert sum(resumed.values()) == 50
    assert dump_store(job.conf, "counts") == dict(job.expected + resumed)
    assert _checkpoints(job)["partition-0"]["inputs"] == {job.source: 400}


def test_changelog_describe_matches_the_topic_the_checkpoint_and_the_stores(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    job = _counting(kafka_bootstrap, topic_name, tmp_path)
    described = json.loads(job.cli("changelog", "describe", "--store", "counts",
                                   "--format", "json").stdout)

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, job.changelog)
    configs = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT)
    settings = described["topics"][job.changelog]
    assert settings["cleanup.policy"] == "compact"
    assert settings == {k: configs[k].value for k in settings}

    changelog = _changelog_partitions(kafka_bootstrap, job.changelog)
    checkpoints = _checkpoints(job)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "describe-test",
                         "isolation.level": "read_committed"})
    try:
        marks = {p: consumer.get_watermark_offsets(TopicPartition(job.changelog, p),
                                                   timeout=TIMEOUT) for p in range(2)}
    finally:
        consumer.close()
    rows = {r["partition"]: r for r in described["partitions"]}
    assert sorted(rows) == [0, 1]
    for p, row in rows.items():
        last = changelog[p]["last"]
        assert (row["store"], row["topic"]) == ("counts", job.changelog)
        assert (row["low"], row["high"]) == marks[p]
        assert row["local_offset"] == last  # the store's OFFSET: it holds the whole changelog
        assert row["checkpointed"] == last == checkpoints[f"partition-{p}"]["changelogs"]["counts"]
        assert row["lag"] == 0, row

    # A store left behind counts the records written after it; one without a local copy has
    # no local offset and no lag. The table shows it.
    stores = tmp_path / "state" / job.name / "counts"
    shutil.copytree(stores / "partition-0", tmp_path / "old-partition-0")
    produce_users(kafka_bootstrap, job.source, 400, 60, 2)
    assert run_job(job.conf, "--bounded").returncode == 0
    shutil.rmtree(stores / "partition-0")
    shutil.copytree(tmp_path / "old-partition-0", stores / "partition-0")
    shutil.rmtree(stores / "partition-1")
    now = _changelog_partitions(kafka_bootstrap, job.changelog)
    behind = sum(1 for m in read_topic(kafka_bootstrap, job.changelog)
                 if m.partition() == 0 and m.offset() > changelog[0]["last"])
    assert behind > 0
    table = job.cli("changelog", "describe").stdout.splitlines()
    assert table[0] == f"{job.changelog}: " + ", ".join(
        f"{k}={v}" for k, v in sorted(settings.items()))
    assert table[1].split() == ["store", "part", "low", "high", "local", "checkpointed", "lag"]
    cells = {int(line.split()[1]): line.split()[2:] for line in table[2:]}
    assert cells[0][2:] == [str(changelog[0]["last"]), str(now[0]["last"]), str(behind)]
    assert cells[1][2:] == ["-", str(now[1]["last"]), "-"]


def test_store_get_range_and_raw_dump(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    job = _counting(kafka_bootstrap, topic_name, tmp_path)
    state = job.by_partition()

    mine = sorted(state[0])[:3]
    other = sorted(state[1])[0]  # lives in partition 1: absent from partition 0's store
    got = _rows(job.cli("store", "get", "--store", "counts", "--partition", "0",
                        *mine, other, "nobody").stdout)
    assert got == [{"partition": 0, "key": u, "value": state[0][u]} for u in mine] + [
        {"partition": 0, "key": other, "value": None},
        {"partition": 0, "key": "nobody", "value": None}]

    keys = sorted(state[1])  # string serde: byte order is str order for these ASCII keys
    start, end = keys[3], keys[9]
    ranged = _rows(job.cli("store", "range", "--store", "counts", "--partition", "1",
                           "--start", start, "--end", end).stdout)
    assert ranged == [{"partition": 1, "key": u, "value": state[1][u]} for u in keys[3:9]]
    head = _rows(job.cli("store", "range", "--store", "counts", "--partition", "1",
                         "--end", keys[2]).stdout)
    assert [r["key"] for r in head] == keys[:2]

    raw = _rows(job.cli("store", "dump", "--store", "counts", "--raw").stdout)
    decoded = {(r["partition"], base64.b64decode(r["key"]).decode()):
               json.loads(base64.b64decode(r["value"])) for r in raw}
    assert decoded == {(p, u): n for p, users in state.items() for u, n in users.items()}
    assert [r["partition"] for r in raw] == sorted(r["partition"] for r in raw)
    only_1 = _rows(job.cli("store", "dump", "--store", "counts", "--partition", "1").stdout)
    assert {r["key"]: r["value"] for r in only_1} == state[1]
    assert {r["partition"] for r in only_1} == {1}


def _two_store_job(bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
                   ) -> tuple[Path, str, dict[str, dict[int, dict[str, int]]]]:
    """A job with stores ``counts`` and ``sums`` over 2 partitions, run to the end of its
    input; returns its config, name and the reference state per store and partition."""
    source, name = topic_name("in"), topic_name("job")
    create_topic(bootstrap, source, 2)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    ref: dict[str, dict[int, dict[str, int]]] = {"counts": {0: {}, 1: {}},
                                                 "sums": {0: {}, 1: {}}}
    for seq in range(1200):
        user, amount = f"user-{(seq * 31) % 70}", seq % 17
        p = hash_partition(user, 2)
        producer.produce(source, key=user.encode(), value=encode(user, amount, seq), partition=p)
        ref["counts"][p][user] = ref["counts"][p].get(user, 0) + 1
        ref["sums"][p][user] = ref["sums"][p].get(user, 0) + amount
    assert producer.flush(TIMEOUT) == 0
    props = counting_job(bootstrap, name, source, tmp_path / "state", **{
        "task.class": "tests.jobs.two_stores.TwoStores",
        "stores.sums.factory": "rocksdb",
        "stores.sums.key.serde": "string",
        "stores.sums.msg.serde": "json",
        "stores.sums.changelog": f"kafka.{name}-sums-changelog",
    })
    conf = write_properties(tmp_path / "job.properties", props)
    run = run_job(conf, "--bounded")
    assert run.returncode == 0, run.stderr[-3000:]
    return conf, name, ref


def _restore_rows(out: str) -> list[list[str]]:
    """The rows of restore's table (store, part, records, bytes, seconds, rec/s, MB/s, mode)."""
    lines = out.splitlines()
    assert lines[0].split() == ["store", "part", "records", "bytes", "seconds", "rec/s", "MB/s",
                                "mode"], out
    return [line.split() for line in lines[1:]]


def _dump(conf: Path, store: str) -> dict[int, dict[str, int]]:
    out = millpond("store", "dump", "--config", str(conf), "--store", store)
    assert out.returncode == 0, out.stderr
    state: dict[int, dict[str, int]] = defaultdict(dict)
    for row in _rows(out.stdout):
        state[row["partition"]][row["key"]] = row["value"]
    return dict(state)


def test_restore_one_store_then_one_partition(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    conf, name, ref = _two_store_job(kafka_bootstrap, topic_name, tmp_path)
    assert _dump(conf, "counts") == ref["counts"] and _dump(conf, "sums") == ref["sums"]
    shutil.rmtree(tmp_path / "state")
    stores = tmp_path / "state" / name

    only_sums = millpond("restore", "--config", str(conf), "--store", "sums")
    assert only_sums.returncode == 0, only_sums.stderr
    rows = _restore_rows(only_sums.stdout)
    assert [(r[0], r[1], r[-1]) for r in rows] == [("sums", "0", "full"), ("sums", "1", "full")]
    assert _dump(conf, "sums") == ref["sums"]
    assert not (stores / "counts").exists(), "--store sums must leave counts alone"

    only_1 = millpond("restore", "--config", str(conf), "--partition", "1")
    assert only_1.returncode == 0, only_1.stderr
    rows = _restore_rows(only_1.stdout)
    # counts[1] is rebuilt from its changelog; sums[1] is intact, so only its (empty) tail.
    assert [(r[0], r[1], r[-1]) for r in rows] == [("counts", "1", "full"), ("sums", "1", "tail")]
    assert int(rows[0][2]) > 0 and int(rows[1][2]) == 0
    assert _dump(conf, "counts") == {1: ref["counts"][1]}
    assert not (stores / "counts" / "partition-0").exists()
    assert _dump(conf, "sums") == ref["sums"]


def _run_on_a_tty(args: list[str], timeout: float = 120) -> tuple[int, str, str]:
    """Run ``millpond <args>`` with stderr on a pseudo-terminal (as in a shell, where restore
    draws its progress bars); returns (exit code, stdout, terminal output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([MILLPOND, *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=slave, stdin=subprocess.DEVNULL, env={**os.environ})
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the terminal closed with the process
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        assert proc.stdout is not None
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def test_restore_full_replays_every_record_with_progress_and_rates(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    job = _counting(kafka_bootstrap, topic_name, tmp_path, n=3000, users=200)
    before = dump_store(job.conf, "counts")
    assert before == dict(job.expected)
    changelog = _changelog_partitions(kafka_bootstrap, job.changelog)

    tail = _restore_rows(job.cli("restore").stdout)  # intact stores: nothing to replay
    assert [(r[1], r[2], r[-1]) for r in tail] == [("0", "0", "tail"), ("1", "0", "tail")]

    code, out, terminal = _run_on_a_tty(["restore", "--config", str(job.conf), "--full"])
    assert code == 0, out + terminal
    rows = _restore_rows(out)
    assert [(r[0], r[1], r[-1]) for r in rows] == [("counts", "0", "full"), ("counts", "1", "full")]
    for store, part, records, size, seconds, rate, mb_rate, _ in rows:
        p = int(part)
        assert int(records) == changelog[p]["records"] > 0
        assert int(size) == changelog[p]["bytes"]
        assert float(seconds) >= 0 and float(rate) > 0 and float(mb_rate) >= 0
        # One progress bar per store partition, labelled with it, drawn to the end.
        label = f"restore {store} p{p}: 100%|"
        count = f"{int(records):,}"
        assert re.search(re.escape(label) + rf"█+\| {count}/{count} records", terminal), terminal
    assert dump_store(job.conf, "counts") == before

"""Test helpers over a real broker: topics, producing inputs, reading topics, job runs."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from millpond.kafka.reading import watermarks

REPO = Path(__file__).resolve().parents[1]
MILLPOND = str(Path(sys.executable).with_name("millpond"))


def create_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(timeout=30)


def topic_layout(bootstrap: str, topic: str) -> tuple[int, dict[str, str]]:
    """``topic``'s partition count and topic configs, asked by a client whose lookups create
    nothing (on a broker that auto-creates, a plain admin client's would)."""
    client = AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})
    parts = len(client.list_topics(topic, timeout=30).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    conf = client.describe_configs([resource])[resource].result(timeout=30)
    return parts, {name: entry.value for name, entry in conf.items()}


class RecordingClient:
    """A real client whose calls of ``methods`` are recorded (name and first argument) and
    passed on; everything else goes straight through."""

    def __init__(self, client: Any, *methods: str) -> None:
        self._client = client
        self._methods = methods
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        if name not in self._methods:
            return real

        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args[0] if args else kwargs.get("topic")))
            return real(*args, **kwargs)

        return record


def produce_users(bootstrap: str, topic: str, n: int, users: int, partitions: int,
                  conf: dict[str, Any] | None = None) -> Counter[str]:
    """Produce ``n`` JSON page views over ``users`` users, keyed (and so partitioned) by user
    (``conf``: more client settings, e.g. a secured broker's)."""
    producer = Producer({**(conf or {}), "bootstrap.servers": bootstrap, "linger.ms": 20})
    expected: Counter[str] = Counter()
    for i in range(n):
        user = f"user-{(i * 7919) % users}"
        producer.produce(topic, key=user.encode(), value=json.dumps({"user_id": user, "i": i}),
                         partition=hash_partition(user, partitions))
        expected[user] += 1
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return expected


def user_sequence(n: int, users: int, partitions: int) -> dict[int, list[str]]:
    """The users :func:`produce_users` sends, per partition in offset order."""
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for i in range(n):
        user = f"user-{(i * 7919) % users}"
        out[hash_partition(user, partitions)].append(user)
    return out


def hash_partition(user: str, partitions: int) -> int:
    """A stable partition for a user (tests don't depend on librdkafka's partitioner)."""
    return int(user.rsplit("-", 1)[1]) % partitions


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Any]:
    """Every record of ``topic`` (all partitions) from the beginning to the current end.

    From each partition's log start, never a fixed offset 0: a fetch at 0 that came back out
    of range (seen once on a just-written output topic) made librdkafka's default reset jump
    to the end and read nothing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    md = consumer.list_topics(topic, timeout=30).topics[topic]
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in md.partitions]
    consumer.assign(parts)
    remaining = {p.partition for p in parts}
    out = []
    deadline = time.monotonic() + 60
    try:
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    remaining.discard(msg.partition())
                    continue
                raise AssertionError(msg.error())
            out.append(msg)
    finally:
        consumer.close()
    assert not remaining, f"did not reach the end of {topic} partitions {remaining}"
    return out


def write_properties(path: Path, props: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def counting_job(bootstrap: str, name: str, inputs: str, state: Path, **extra: Any) -> dict[str, Any]:
    props = {
        "job.name": name,
        "task.class": "tests.jobs.counting.Counter",
        "task.inputs": f"kafka.{inputs}",
        "task.commit.ms": 300,
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "stores.counts.factory": "rocksdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "json",
        "stores.counts.changelog": f"kafka.{name}-counts-changelog",
        "job.logged.store.base.dir": str(state),
        # Static membership: a restarted process takes its partitions back at once
        # instead of waiting for the killed member's session to time out.
        "systems.kafka.consumer.group.instance.id": f"{name}-process-1",
        "systems.kafka.consumer.session.timeout.ms": 10000,
    }
    props.update(extra)
    return props


def run_job(config: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60,
            ) -> subprocess.CompletedProcess[str]:
    """Run ``millpond run --config`` to completion (use --bounded) in the repo dir."""
    return subprocess.run([MILLPOND, "run", "--config", str(config), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def start_job(config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([MILLPOND, "run", "--config", str(config), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})


def stop_job(job: subprocess.Popen[str], timeout: float = 30) -> None:
    """SIGTERM a started job and wait ``timeout`` s for it to stop; SIGKILL it past that
    (the test then fails on its exit code)."""
    job.send_signal(signal.SIGTERM)
    try:
        job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait(timeout=10)


def millpond(*args: str, timeout: float = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MILLPOND, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def dump_store(config: Path, store: str) -> dict[str, Any]:
    """Every partition of ``store`` through `millpond store dump`, as {key: value}."""
    out = millpond("store", "dump", "--config", str(config), "--store", store)
    assert out.returncode == 0, out.stdout + out.stderr
    state: dict[str, Any] = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        state[row["key"]] = row["value"]
    return state


def state_diff(state: dict[str, int], expected: Counter[str]) -> tuple[int, int]:
    """(lost, duplicated) per-key count updates of ``state`` against the reference."""
    lost = sum(max(0, n - state.get(u, 0)) for u, n in expected.items())
    duplicated = sum(max(0, n - expected.get(u, 0)) for u, n in state.items())
    return lost, duplicated


def latest_by_key(records: Iterable[Any]) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for msg in records:
        latest[msg.key()] = msg.value()
    return latest


def readline_within(proc: subprocess.Popen[str], timeout: float) -> str | None:
    """One line of ``proc``'s output, '' at its end, None if none came within ``timeout``.

    ``readline()`` alone blocks for as long as a silent process lives; the read runs in a
    helper thread so the wait is bounded (the thread ends when the process is killed).
    """
    assert proc.stdout is not None
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(proc.stdout.readline).result(timeout=max(0.0, timeout))
    except FutureTimeout:
        return None
    finally:
        pool.shutdown(wait=False)


def wait_for_line(proc: subprocess.Popen[str], needle: str, timeout: float = 60) -> list[str]:
    """Read ``proc``'s output until a line contains ``needle``; the lines read so far."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = readline_within(proc, deadline - time.monotonic())
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} not seen:\n{''.join(lines[-30:])}")


READY = re.compile(r"task (partition-\d+) ready: restored (\d+) records in \S+s, "
                   r"input offsets (\{[^}]*\})")


def ready_lines(log: str) -> list[tuple[str, int, dict[str, int]]]:
    """(task, changelog records restored, input offsets it resumes at) of every
    ``task ... ready`` line of a `millpond run` log, in order."""
    return [(m.group(1), int(m.group(2)), ast.literal_eval(m.group(3)))
            for m in READY.finditer(log)]


def read_stable(bootstrap: str, topic: str, timeout: float = 60) -> list[Any]:
    """Every committed record of ``topic`` up to each partition's last stable offset now.

    Unlike :func:`read_topic`, this ends while a transaction is open (a running or killed
    job's): a ``read_committed`` consumer reports no end of partition until the high
    watermark is readable, so it reads to the LSO the broker gives for watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    out: list[Any] = []
    try:
        md = consumer.list_topics(topic, timeout=30).topics[topic]
        ends: dict[int, int] = {}
        for p in md.partitions:
            # (retries a just-created topic's missing leader, within the timeout)
            _, stable = watermarks(consumer, topic, p, timeout)
            if stable > 0:
                ends[p] = stable
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                if msg.error():
                    raise AssertionError(msg.error())
                if msg.offset() < ends.get(msg.partition(), -1):  # type: ignore[operator]
                    out.append(msg)
            for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
        assert not ends, f"did not reach the last stable offset of {topic} partitions {ends}"
    finally:
        consumer.close()
    return out


def checkpoint_history(bootstrap: str, job_name: str, job_id: str = "1",
                       ) -> dict[str, list[dict[str, int]]]:
    """Every committed checkpoint's input offsets per task, oldest first, read
    ``read_committed`` from the job's checkpoint topic (empty if it has none yet)."""
    from millpond.changelog.checkpoint import Checkpoint, checkpoint_topic

    history: dict[str, list[dict[str, int]]] = {}
    records = read_stable(bootstrap, checkpoint_topic(job_name, job_id))
    for msg in sorted(records, key=lambda m: (m.partition(), m.offset())):
        if msg.value() is not None:
            ckpt = Checkpoint.from_bytes(msg.value())
            history.setdefault(ckpt.task, []).append(dict(ckpt.inputs))
    return history


def count_output_diff(bootstrap: str, sink: str, expected: Counter[str],
                      isolation: str = "read_committed") -> tuple[int, int]:
    """(lost, duplicated) of a counting job's output: it must hold ``(user, i)`` for every
    ``i`` in 1..expected[user]; each extra copy (or a record never expected) is a duplicate."""
    seen: Counter[tuple[str, int]] = Counter()
    for msg in read_topic(bootstrap, sink, isolation):
        seen[(msg.key().decode(), json.loads(msg.value()))] += 1
    wanted = {(user, i) for user, n in expected.items() for i in range(1, n + 1)}
    lost = len(wanted - set(seen))
    duplicated = sum(n - 1 for n in seen.values() if n > 1) + len(set(seen) - wanted)
    return lost, duplicated


def checkpoint_records(bootstrap: str, job_name: str, job_id: str = "1",
                       ) -> dict[int, list[tuple[float, dict[str, int]]]]:
    """The job's committed checkpoint records per task partition, in the order they were
    written: (unix time of the write in seconds, next input offsets)."""
    out: dict[int, list[tuple[float, dict[str, int]]]] = {}
    for msg in read_topic(bootstrap, f"__millpond_checkpoint_{job_name}_{job_id}"):
        doc = json.loads(msg.value())
        out.setdefault(msg.partition(), []).append((msg.timestamp()[1] / 1000, doc["inputs"]))
    return out


_SUMMARY = re.compile(r"task partition-(\d+): processed (\d+), skipped \d+, .*, (\d+) commits")


def task_summaries(log: str) -> dict[int, tuple[int, int]]:
    """partition -> (messages processed, commits) from the per-task summary lines
    `millpond run` logs at shutdown (the last summary of a partition wins)."""
    return {int(m[1]): (int(m[2]), int(m[3])) for m in _SUMMARY.finditer(log)}


_ASSIGNED = re.compile(r"assigned partitions \[([0-9, ]*)\]")


def assigned_partitions(lines: Iterable[str]) -> list[set[int]]:
    """The partition sets of the ``assigned partitions [...]`` lines, in order."""
    out = []
    for line in lines:
        m = _ASSIGNED.search(line)
        if m:
            out.append({int(p) for p in m[1].split(",") if p.strip()})
    return out


class OutputLines:
    """Every line a process prints, read by a background thread as they come, so a test can
    wait on its output with a bound and still look at all of it later (use ``proc.wait``,
    not ``communicate``, with it)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self.lines: list[str] = []
        self._closed = False
        self._cond = threading.Condition()
        threading.Thread(target=self._read, args=(proc.stdout,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_for(self, what: str, ok: Callable[[list[str]], bool], timeout: float = 60,
                 ) -> list[str]:
        """Wait until ``ok(lines so far)``; the lines so far. Fails naming ``what``."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or ok(self.lines), timeout)
            lines = list(self.lines)
        if not ok(lines):
            raise AssertionError(f"{what}: not seen within {timeout} s:\n{''.join(lines[-30:])}")
        return lines

    def so_far(self) -> str:
        """What the process printed so far (it may still be running)."""
        with self._cond:
            return "".join(self.lines)

    def text(self, timeout: float = 30) -> str:
        """Everything printed, once the process closed its output (bounded)."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed, timeout)
            return "".join(self.lines)

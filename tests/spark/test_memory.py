"""Spark commands within their memory (issue #36): a rebuild whose state is bigger than the
driver's heap, and Spark running out of memory said in one line.

The rebuild test runs the console script with a 512 MB driver over a one-partition
changelog of ~120 MB of state: the old code cached it in the heap (MEMORY_AND_DISK) and
collected the partition into the driver, which died of ``OutOfMemoryError`` on it (checked
once by hand against the commit before the fix). The 2 GB
changelog at Spark's defaults is the benchmark's (benchmarks/spark_rebuild.py --value-bytes).
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from millpond.changelog.checkpoint import read_offset_file
from millpond.spark.localdirs import read_store_dir
from millpond.spark.oom import explain
from tests.kafka_util import millpond
from tests.spark.helpers import STORE, TIMEOUT, ChangelogJob

RECORDS = 120_000
VALUE_BYTES = 1024
SPARK_TIMEOUT = 240


def _produce_big(job: ChangelogJob, records: int, seed: int = 36) -> dict[bytes, bytes]:
    """``records`` ~1 KB values into partition 0 of the job's changelog, as fast as the
    broker takes them: distinct keys, one in ten overwritten, one in fifty deleted. Returns
    the state as key -> sha256(value)."""
    producer = Producer({"bootstrap.servers": job.bootstrap, "linger.ms": 20,
                         "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 18})
    rng = random.Random(seed)
    state: dict[bytes, bytes] = {}
    for i in range(records):
        key = f"k{rng.randrange(i) if i and rng.random() < 0.1 else i:08d}".encode()
        value = None if rng.random() < 0.02 else (
            f'{{"seq":{i},"pad":"{rng.randbytes(VALUE_BYTES // 2 - 16).hex()}"}}'.encode())
        while True:
            try:
                producer.produce(job.topic, key=key, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if value is None:
            state.pop(key, None)
        else:
            state[key] = hashlib.sha256(value).digest()
    assert producer.flush(TIMEOUT * 4) == 0
    return state


def _rebuild(job: ChangelogJob, *extra: str) -> subprocess.CompletedProcess[str]:
    return millpond("spark", "rebuild", "--config", str(job.config_path), "--store", STORE,
                    "--rocksdb-dirs", "--master", "local[2]", *extra, timeout=SPARK_TIMEOUT)


@pytest.mark.kafka
@pytest.mark.spark
def test_rebuild_of_a_state_bigger_than_the_driver_heap_streams_to_rocksdb(
        make_job: Callable[..., ChangelogJob]) -> None:
    job = make_job(partitions=1)
    expected = _produce_big(job, RECORDS)
    done = _rebuild(job, "--driver-memory", "512m")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["records_read"] == RECORDS
    assert result["keys"] == len(expected)
    live = Path(result["rocksdb_dirs"][0])
    assert read_offset_file(live).offset == RECORDS - 1  # type: ignore[union-attr]
    got = {bytes(k): hashlib.sha256(v).digest() for k, v in read_store_dir(str(live), False)}
    assert got == expected


@pytest.mark.kafka
@pytest.mark.spark
def test_spark_out_of_memory_is_one_line_naming_the_option(
        make_job: Callable[..., ChangelogJob]) -> None:
    # A task's result (the ~2 MB of rows brought to the driver) over a 1 MB
    # spark.driver.maxResultSize: Spark's own failure, said as what to raise.
    job = make_job(partitions=1)
    _produce_big(job, 2_000)
    small = _rebuild(job, "--spark-conf", "spark.driver.maxResultSize=1m")
    assert small.returncode == 1, small.stdout + small.stderr[-3000:]
    last = small.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Spark ran out of memory") or "Spark ran out of memory" in last
    assert "spark.driver.maxResultSize" in last and "Traceback" not in small.stderr, \
        small.stderr[-3000:]


# ---- the one line (unit: Spark's failures as PySpark raises them) -------------------------


class _Lost(Exception):
    pass


def _chained(*texts: str) -> BaseException:
    """An exception whose chain carries ``texts``, innermost first (as Py4J nests them)."""
    exc: BaseException | None = None
    for text in texts:
        try:
            try:
                if exc is not None:
                    raise exc
            finally:
                raise _Lost(text)
        except _Lost as new:
            exc = new
    assert exc is not None
    return exc


def test_a_heap_oom_in_local_mode_names_driver_memory() -> None:
    exc = _chained("Job aborted due to stage failure: Lost task 0.0 in stage 17.0 (TID 20) "
                   "(localhost executor driver): java.lang.OutOfMemoryError: Java heap space")
    line = explain(exc, "1g", None)
    assert line is not None and "--driver-memory" in line and "now 1g" in line
    assert "Java heap space" in line and "\n" not in line


def test_an_executor_oom_on_a_cluster_names_executor_memory() -> None:
    exc = _chained("Lost task 3.0 in stage 2.0 (TID 9) (10.0.0.5 executor 1): "
                   "java.lang.OutOfMemoryError: GC overhead limit exceeded")
    line = explain(exc, "1g", "spark://10.0.0.1:7077")
    assert line is not None and "spark.executor.memory" in line


def test_a_driver_jvm_dead_of_oom_is_named_from_its_console(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from millpond.spark import oom

    monkeypatch.setattr(oom, "jvm_oom", [])
    monkeypatch.setattr(oom, "_jvm_exit", lambda wait_s=5.0: None)
    dead = _chained("Answer from Java side is empty", "[Errno 111] Connection refused")
    assert explain(dead, "1g", None) is None  # a JVM gone for another reason: not ours to say
    assert oom.note_console_line("java.lang.OutOfMemoryError: Java heap space\n")
    line = explain(dead, "1g", None)
    assert line is not None and "exited" in line and "--driver-memory" in line


def test_other_failures_are_not_called_memory() -> None:
    assert explain(_chained("Py4JJavaError: org.apache.kafka.common.errors."
                            "TimeoutException: Timed out waiting for a node"), "1g", None) is None


def test_the_jvm_console_notes_an_oom_and_drops_the_stack_frames_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from millpond.spark import console, oom

    monkeypatch.setattr(oom, "jvm_oom", [])
    lines = ["26/11/26 WARN Something: before\n", "\tat kept.Before(Before.java:1)\n",
             "26/11/26 ERROR Executor: Exception in task 0.0 in stage 12.0 (TID 14)\n",
             "java.lang.OutOfMemoryError: Java heap space\n",
             "\tat java.base/java.nio.HeapByteBuffer.<init>(HeapByteBuffer.java:64)\n",
             "26/11/26 ERROR Utils: Aborting task\n",
             "Caused by: java.lang.OutOfMemoryError: Java heap space\n",
             "\t... 12 more\n"]
    read_fd, write_fd = os.pipe()
    os.write(write_fd, "".join(lines).encode())
    os.close(write_fd)
    shown: list[str] = []
    console.relay(read_fd, shown.append)
    assert shown == [lines[0], lines[1], lines[2], lines[3], lines[5], lines[6]]
    assert oom.jvm_oom == ["Java heap space"]

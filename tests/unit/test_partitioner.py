"""The key -> partition functions against Kafka's own vectors, and job.partitioner parsing."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from millpond.config import Config, ConfigError
from millpond.ops.offline import Job
from millpond.partitioner import (
    consistent_partition,
    librdkafka_setting,
    murmur2_partition,
    partition_of,
)

# Kafka's UtilsTest.testMurmur2: the Java client's murmur2, as signed 32-bit ints.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "signed"), JAVA_MURMUR2.items())
@pytest.mark.parametrize("partitions", [1, 3, 12, 1000])
def test_murmur2_is_the_java_clients(key: bytes, signed: int, partitions: int) -> None:
    # Java: Utils.toPositive(murmur2(key)) % n, toPositive = h & 0x7fffffff
    assert murmur2_partition(key, partitions) == (signed & 0x7FFFFFFF) % partitions


def test_consistent_is_crc32() -> None:
    for key in (b"", b"a", b"user-17", bytes(range(256))):
        assert consistent_partition(key, 7) == zlib.crc32(key) % 7


def test_partition_of_refuses_what_has_no_partition() -> None:
    with pytest.raises(ValueError, match="without a key"):
        partition_of(None, 4)
    with pytest.raises(ValueError, match="partitions must be > 0"):
        partition_of(b"k", 0)
    with pytest.raises(ValueError, match="unknown partitioner 'fnv'"):
        partition_of(b"k", 4, "fnv")
    with pytest.raises(ValueError, match="empty key"):
        partition_of(b"", 4, "consistent_random")
    assert partition_of(b"", 4) == murmur2_partition(b"", 4)  # murmur2 hashes an empty key
    assert partition_of(b"21", 12) == murmur2_partition(b"21", 12)
    assert partition_of(b"21", 12, "consistent_random") == consistent_partition(b"21", 12)
    assert partition_of(b"21", 12, "murmur2_random") == murmur2_partition(b"21", 12)


BASE = """job.name=p
task.class=tests.jobs.counting.CountTask
task.inputs=kafka.in
systems.kafka.bootstrap.servers=127.0.0.1:1
"""


def _config(tmp_path: Path, extra: str) -> Config:
    path = tmp_path / "job.properties"
    path.write_text(BASE + extra)
    return Config.load(path)


def test_job_partitioner_default_and_producers(tmp_path: Path) -> None:
    config = _config(tmp_path, "")
    assert config.job.partitioner == "murmur2"
    assert Job(config).producer_conf["partitioner"] == "murmur2_random"
    config = _config(tmp_path, "job.partitioner=consistent_random\n")
    assert Job(config).producer_conf["partitioner"] == "consistent_random"
    assert librdkafka_setting("murmur2") == "murmur2_random"


def test_producer_partitioner_alone_decides(tmp_path: Path) -> None:
    config = _config(tmp_path, "systems.kafka.producer.partitioner=consistent_random\n")
    assert config.job.partitioner == "consistent_random"
    # a librdkafka partitioner with no function here: the producer keeps it, the job murmur2
    config = _config(tmp_path, "systems.kafka.producer.partitioner=fnv1a\n")
    assert config.job.partitioner == "murmur2"
    assert Job(config).producer_conf["partitioner"] == "fnv1a"


def test_partitioners_that_disagree_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _config(tmp_path, "job.partitioner=murmur2\n"
                          "systems.kafka.producer.partitioner=consistent_random\n")
    text = str(err.value)
    assert "job.properties:6: systems.kafka.producer.partitioner" in text
    assert "job.partitioner=murmur2 (at " in text and "job.properties:5" in text
    with pytest.raises(ConfigError, match=r"job.properties:5: job.partitioner: unknown value"):
        _config(tmp_path, "job.partitioner=random\n")

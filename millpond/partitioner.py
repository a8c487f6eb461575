"""Kafka's key -> partition functions, exactly as the producers compute them.

A job's state is split by input partition, so any tool that moves state between partitions
(Spark bootstrap and rescale) must put each key where a producer would put its messages.
Two functions, chosen by ``job.partitioner``:

``murmur2`` (the default)
    The Java client's default partitioner, and librdkafka's ``murmur2_random`` for keyed
    messages: murmur2 of the key bytes (seed ``0x9747b28c``), made positive by masking the
    sign bit, modulo the partition count. The hash is the ``murmurhash2`` package's (a
    compiled MurmurHash2, which with Kafka's seed gives the Java client's ``Utils.murmur2``).
``consistent_random``
    librdkafka's default (``consistent_random``): CRC-32 of the key bytes modulo the
    partition count.

Messages without a key go to a random partition under both, and so does an empty key under
``consistent_random`` (librdkafka tests the key's length), so no function can place them:
:func:`partition_of` refuses them.

The job's own producers are set to the same function (librdkafka ``partitioner``), so the
outputs of a task that sends with a key land where a Java producer would put them.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from murmurhash2 import murmurhash2

PartitionFn = Callable[[bytes, int], int]

KAFKA_MURMUR2_SEED = 0x9747B28C  # org.apache.kafka.common.utils.Utils.murmur2

DEFAULT_PARTITIONER = "murmur2"


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The Java client's default partition of ``key`` among ``partitions``."""
    return (murmurhash2(key, KAFKA_MURMUR2_SEED) & 0x7FFFFFFF) % partitions


def consistent_partition(key: bytes, partitions: int) -> int:
    """librdkafka's ``consistent_random`` partition of a keyed message: CRC-32 mod count."""
    return zlib.crc32(key) % partitions


# job.partitioner value -> (function, librdkafka `partitioner` setting that matches it)
PARTITIONERS: dict[str, tuple[PartitionFn, str]] = {
    "murmur2": (murmur2_partition, "murmur2_random"),
    "consistent_random": (consistent_partition, "consistent_random"),
}
# librdkafka's names for the same functions, accepted as job.partitioner values too.
ALIASES = {"murmur2_random": "murmur2"}


def canonical(name: str) -> str:
    """The job.partitioner name of ``name`` (an alias such as ``murmur2_random`` included).

    Raises ValueError naming the valid values for an unknown name.
    """
    name = ALIASES.get(name, name)
    if name not in PARTITIONERS:
        valid = ", ".join([*PARTITIONERS, *ALIASES])
        raise ValueError(f"unknown partitioner {name!r}; valid values: {valid}")
    return name


def partitioner(name: str = DEFAULT_PARTITIONER) -> PartitionFn:
    """The key -> partition function called ``name`` (see :data:`PARTITIONERS`)."""
    return PARTITIONERS[canonical(name)][0]


def librdkafka_setting(name: str) -> str:
    """The librdkafka producer ``partitioner`` value that places keys as ``name`` does."""
    return PARTITIONERS[canonical(name)][1]


def partition_of(key: bytes | None, partitions: int, name: str = DEFAULT_PARTITIONER) -> int:
    """Partition of the serialized ``key`` among ``partitions`` under partitioner ``name``."""
    if key is None:
        raise ValueError("a message without a key goes to a random partition: it has no "
                         "partition to compute")
    if partitions <= 0:
        raise ValueError(f"partitions must be > 0, got {partitions}")
    name = canonical(name)
    if not key and name == "consistent_random":
        raise ValueError("consistent_random sends a message with an empty key to a random "
                         "partition: it has no partition to compute")
    return PARTITIONERS[name][0](key, partitions)

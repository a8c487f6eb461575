"""Keeping Spark jobs within their memory: spill, never cache, and stream in small slices.

A DataFrame read more than once (statistics, then the output) is kept on disk only
(:func:`spill`): Spark's in-memory cache (``MEMORY_AND_DISK``) fills the heap with rows it
could spill, and a 1 GB driver ran out of heap on a 200 MB changelog. Rows brought to this process (to write
the RocksDB directories where the command runs) come through ``toLocalIterator``, which
collects one Spark partition at a time in the driver (two with prefetch): they are range
partitioned into slices of about :data:`SLICE_BYTES`, so the driver holds a few of those,
whatever the size of the state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SLICE_BYTES = 16 << 20  # rows per Spark partition brought to the driver, in bytes


def spill(df: DataFrame) -> DataFrame:
    """``df`` computed once, at its first action, onto local disk only (Spark's local dirs),
    not into the heap: a local checkpoint with ``DISK_ONLY`` rows, serialized as they stream.

    Not ``persist(DISK_ONLY)``: a persisted DataFrame is built into columnar batches of
    10,000 rows in the heap before it goes to disk (10 MB each with 1 KB values, outside
    the memory Spark accounts for), which ran a 1 GB driver out of heap on a 2 GB changelog.
    Its blocks go when ``df`` is no longer referenced (Spark's context cleaner)."""
    from pyspark import StorageLevel

    return df.localCheckpoint(eager=False, storageLevel=StorageLevel.DISK_ONLY)


def release(df: DataFrame) -> None:
    """Drop the blocks of a :func:`spill` result now, not when Spark's cleaner gets to it."""
    try:
        df._jdf.logicalPlan().rdd().unpersist(False)  # the local checkpoint's LogicalRDD
    except Exception:  # not a local checkpoint, or a JVM already gone: nothing to drop
        pass


def row_bytes(*columns: str) -> Any:
    """A column: the summed lengths of binary ``columns`` (0 for nulls)."""
    from pyspark.sql import functions as F

    total = F.lit(0).cast("long")
    for name in columns:
        total = total + F.coalesce(F.length(name).cast("long"), F.lit(0).cast("long"))
    return total


def slices(total_bytes: int, at_least: int = 1, slice_bytes: int = SLICE_BYTES) -> int:
    """How many slices of at most about ``slice_bytes`` hold ``total_bytes`` (>= ``at_least``)."""
    return max(1, at_least, -(-max(0, total_bytes) // max(1, slice_bytes)))


def sorted_rows(df: DataFrame, partition: str, total_bytes: int, at_least: int = 1,
                slice_bytes: int = SLICE_BYTES) -> Any:
    """An iterator over ``df``'s (``partition``, key_bytes, value_bytes) rows in order of
    (``partition``, key_bytes), streamed to this process slice by slice: rows of one
    partition come contiguous and sorted, as :class:`~millpond.spark.localdirs.DirWriter`
    needs. ``total_bytes`` (keys and values) sizes the slices."""
    n = slices(total_bytes, at_least, slice_bytes)
    ordered = (df.select(partition, "key_bytes", "value_bytes")
               .repartitionByRange(n, partition, "key_bytes")
               .sortWithinPartitions(partition, "key_bytes"))
    return ((r[0], r[1], r[2]) for r in ordered.toLocalIterator(prefetchPartitions=True))

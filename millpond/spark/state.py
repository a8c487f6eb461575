"""Changelog records -> store state: the last record of every (partition, key).

A changelog is a log of puts (value) and deletes (null value, a tombstone); a store's
content at an offset is, per partition and key, the value of the key's last record up to
that offset, unless that record is a tombstone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STATE_COLUMNS = ("partition", "key_bytes", "value_bytes", "offset", "timestamp")


def last_records(raw: DataFrame) -> DataFrame:
    """One row per (partition, key): its last record, tombstones included.

    Columns: partition, key_bytes, value_bytes (null for a tombstone), offset, timestamp and
    ``records`` (how many records the key had in ``raw``). Records without a key (which a
    compacted topic refuses anyway) are ignored.
    """
    from pyspark.sql import functions as F

    grouped = raw.where(F.col("key").isNotNull()).groupBy(
        "partition", F.col("key").alias("key_bytes")
    )
    last = grouped.agg(
        F.max_by(F.struct("value", "offset", "timestamp"), "offset").alias("last"),
        F.count(F.lit(1)).alias("records"),
    )
    return last.select(
        "partition",
        "key_bytes",
        F.col("last.value").alias("value_bytes"),
        F.col("last.offset").alias("offset"),
        F.col("last.timestamp").alias("timestamp"),
        "records",
    )


def live_keys(last: DataFrame) -> DataFrame:
    """The rows of :func:`last_records` that are not tombstones: the store's content."""
    from pyspark.sql import functions as F

    return last.where(F.col("value_bytes").isNotNull()).select(*STATE_COLUMNS)

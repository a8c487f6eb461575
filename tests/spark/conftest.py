"""Fixtures of the Spark tests: one local SparkSession for the session, and test jobs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import unavailable
from tests.spark.helpers import ChangelogJob

# Tests run many tiny Spark jobs in fresh JVMs: the C1 compiler alone warms up faster.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# ... and compiling whole-stage code costs more than it saves on a few hundred rows.
FAST_SQL = {"spark.sql.codegen.wholeStage": "false"}


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2] SparkSession with the Kafka connector (skips/fails per ``unavailable``)."""
    from millpond.spark.errors import SparkUnavailableError
    from millpond.spark.session import SparkSettings, get_spark

    try:
        session = get_spark(SparkSettings(
            master="local[2]", shuffle_partitions=2, app_name="millpond-tests",
            conf={"spark.driver.extraJavaOptions": FAST_JVM, **FAST_SQL},
        ))
    except SparkUnavailableError as exc:
        unavailable(f"Spark cannot run: {exc}")
    yield session
    session.stop()


@pytest.fixture
def make_job(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> Callable[..., ChangelogJob]:
    """Build a :class:`ChangelogJob` with a unique job name (so unique topics)."""

    def make(partitions: int = 3, guarantee: str = "at-least-once") -> ChangelogJob:
        return ChangelogJob(kafka_bootstrap, topic_name("job"), tmp_path / "job",
                            partitions=partitions, guarantee=guarantee)

    return make

"""Spark's console and progress as a user sees them, without starting Spark: the JVM's lines
that need no action are dropped (Ivy summed up in one line), the rest reach stderr; Spark
jobs' tasks are one labelled progress line (or bar)."""

from __future__ import annotations

import io
import logging
import os
import re
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from millpond.spark.console import classify, relay
from millpond.spark.progress import spark_progress
from millpond.spark.session import LOG4J2_CONFIG, SparkSettings, session_conf

IVY_FIRST_RUN = """\
:: loading settings :: file = /home/u/.cache/millpond/ivy/ivysettings.xml
WARNING: Using incubator modules: jdk.incubator.vector
Ivy Default Cache set to: /home/u/.cache/millpond/ivy/cache
The jars for the packages stored in: /home/u/.cache/millpond/ivy/jars
org.apache.spark#spark-sql-kafka-0-10_2.13 added as a dependency
:: resolving dependencies :: org.apache.spark#spark-submit-parent-82;1.0
\tconfs: [default]
\tfound org.apache.spark#spark-sql-kafka-0-10_2.13;4.1.1 in maven
downloading https://repo1.maven.org/maven2/org/apache/kafka/kafka-clients/3.9.1/kafka-clients-3.9.1.jar ...
\t[SUCCESSFUL ] org.apache.kafka#kafka-clients;3.9.1!kafka-clients.jar (412ms)
:: resolution report :: resolve 835ms :: artifacts dl 24ms
\t---------------------------------------------------------------------
\t|      default     |   11  |   0   |   0   |   0   ||   11  |   0   |
:: retrieving :: org.apache.spark#spark-submit-parent-82
\tconfs: [default]
\t11 artifacts copied, 0 already retrieved (14210kB/31ms)
Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties
Setting default log level to "WARN".
To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).
26/11/26 07:31:40 WARN KafkaDataConsumer: KafkaDataConsumer is not running in UninterruptibleThread.
Traceback (most recent call last):
"""


def test_the_jvm_console_keeps_what_asks_for_attention(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="millpond.spark")
    read_fd, write_fd = os.pipe()
    os.write(write_fd, IVY_FIRST_RUN.encode())
    os.close(write_fd)
    shown: list[str] = []
    relay(read_fd, shown.append)
    assert shown == [
        "26/11/26 07:31:40 WARN KafkaDataConsumer: KafkaDataConsumer is not running in "
        "UninterruptibleThread.\n",
        "Traceback (most recent call last):\n",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "resolved the Kafka connector's jars with Ivy (11 artifacts copied, 0 already "
        "retrieved (14210kB/31ms))"]


def test_ivy_problems_are_shown() -> None:
    for line in (":: problems summary ::", "\t:::: WARNINGS", "\t\tmodule not found: x#y;1.0",
                 "\t\t::::::::::::::::::::::::::::::::::::::::::::::",
                 "\t\t::          UNRESOLVED DEPENDENCIES         ::",
                 'Exception in thread "main" java.lang.RuntimeException: [unresolved '
                 "dependency: org.apache.spark#spark-sql-kafka-0-10_2.13;9.9.9: not found]"):
        assert classify(line + "\n") == "show", line


def test_the_driver_jvm_gets_millponds_log4j2_config_before_the_users_options(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("millpond.spark.session.connector_conf", dict)  # no jar look-ups
    assert LOG4J2_CONFIG.is_file()
    text = LOG4J2_CONFIG.read_text()
    assert "NativeCodeLoader" in text and "resolves to a loopback address" in text
    own = session_conf(SparkSettings(master="local[1]"))
    assert own["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"
    theirs = session_conf(SparkSettings(master="local[1]", conf={
        "spark.driver.extraJavaOptions": "-Xss4m -Dlog4j2.configurationFile=/mine.xml"}))
    assert theirs["spark.driver.extraJavaOptions"] == (
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG} -Xss4m -Dlog4j2.configurationFile=/mine.xml")


# -- progress of Spark jobs, against a fake status tracker -------------------------------------

@dataclass
class Stage:
    tasks: int
    completed: int = 0
    active: int = 0


@dataclass
class FakeTracker:
    """The part of pyspark's StatusTracker that spark_progress reads."""

    jobs: dict[int, list[int]] = field(default_factory=dict)
    stages: dict[int, Stage] = field(default_factory=dict)
    polls: int = 0

    def getJobIdsForGroup(self) -> list[int]:  # noqa: N802 - pyspark's name
        self.polls += 1
        return list(self.jobs)

    def getJobInfo(self, job_id: int) -> object:  # noqa: N802
        return types.SimpleNamespace(stageIds=self.jobs[job_id])

    def getStageInfo(self, stage_id: int) -> object:  # noqa: N802
        s = self.stages[stage_id]
        return types.SimpleNamespace(numTasks=s.tasks, numCompletedTasks=s.completed,
                                     numActiveTasks=s.active)


def fake_spark(monkeypatch: pytest.MonkeyPatch, tracker: FakeTracker) -> None:
    context = types.SimpleNamespace(statusTracker=lambda: tracker)
    pyspark = types.SimpleNamespace(SparkContext=types.SimpleNamespace(
        _active_spark_context=context))
    monkeypatch.setitem(sys.modules, "pyspark", pyspark)


def seen(tracker: FakeTracker, after: int) -> None:
    """Wait until the watcher has polled ``tracker`` twice more than ``after`` times."""
    deadline = time.monotonic() + 10
    while tracker.polls < after + 2:
        assert time.monotonic() < deadline, "spark_progress never polled"
        time.sleep(0.005)


def run_jobs(tracker: FakeTracker) -> None:
    """Job 0: a stage of 8 tasks, half done, then done; job 1: a skipped stage (never ran)
    and a stage of 4."""
    tracker.jobs[0] = [0]
    tracker.stages[0] = Stage(8, completed=4, active=2)
    seen(tracker, tracker.polls)
    tracker.stages[0] = Stage(8, completed=8)
    tracker.jobs[1] = [1, 2]
    tracker.stages[1] = Stage(100)  # skipped: its output was reused
    tracker.stages[2] = Stage(4, completed=4)


def test_spark_progress_off_a_terminal_is_labelled_lines_of_tasks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tracker, out = FakeTracker(), io.StringIO()
    fake_spark(monkeypatch, tracker)
    with spark_progress("spark audit counts", stream=out, poll_s=0.001, every_s=0):
        run_jobs(tracker)
    lines = out.getvalue().splitlines()
    assert lines[0] == "spark audit counts: 4/8 tasks", lines
    assert re.fullmatch(r"spark audit counts: 12/12 tasks, done in \d+\.\d\d s", lines[-1]), lines
    assert all(re.fullmatch(r"spark audit counts: \d+/\d+ tasks", x) for x in lines[1:-1]), lines


def test_spark_progress_on_a_terminal_is_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    tracker, out = FakeTracker(), io.StringIO()
    fake_spark(monkeypatch, tracker)
    with spark_progress("spark rebuild counts", stream=out, tty=True, poll_s=0.001):
        run_jobs(tracker)
    assert re.search(r"spark rebuild counts: 100%\|[█#]+\| 12/12 tasks", out.getvalue()), (
        out.getvalue())
    assert "done in" not in out.getvalue()


def test_no_spark_job_no_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command that fails before Spark starts (or runs no job) shows nothing."""
    out = io.StringIO()
    monkeypatch.setitem(sys.modules, "pyspark", types.SimpleNamespace(
        SparkContext=types.SimpleNamespace(_active_spark_context=None)))
    with pytest.raises(RuntimeError), spark_progress("spark audit counts", stream=out,
                                                      poll_s=0.001):
        time.sleep(0.02)
        raise RuntimeError("bad config")
    assert out.getvalue() == ""
    assert not [t for t in threading.enumerate() if t.name == "spark-progress"]


def test_log4j2_config_is_packaged() -> None:
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"spark/*.properties"' in pyproject

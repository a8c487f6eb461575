"""``--master`` defaults to ``local[*]``, or to spark-submit's master under spark-submit
(docs/operations/cluster.md, the CLI's ``--master`` help): the same ``millpond spark
rebuild`` run as a user runs it, without ``--master``, through the console script and
through ``spark-submit --master local[1]`` with the script ``millpond spark submit-script``
prints; the master each session ran on is read from its Spark event log (its
``spark.master``), and both rebuilds are checked whole."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import unavailable
from tests.kafka_util import (
    counting_job,
    create_topic,
    millpond,
    produce_users,
    run_job,
    write_properties,
)
from tests.spark.conftest import FAST_JVM

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
TIMEOUT = 300
MASTER = re.compile(r'"spark\.master":"([^"]+)"')


def _masters(events: Path) -> set[str]:
    """The ``spark.master`` of every application that logged its events in ``events``."""
    return {m for log in events.rglob("*") if log.is_file()
            for m in MASTER.findall(log.read_text(errors="replace"))}


def _report(out: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    doc, _ = json.JSONDecoder().raw_decode(out.stdout, out.stdout.index("{"))
    return dict(doc)


def test_master_is_local_star_or_spark_submits(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    if not Path(SPARK_SUBMIT).exists():
        unavailable(f"spark-submit is not installed beside {sys.executable}")
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 300, 30, 2)
    config = write_properties(tmp_path / "job.properties",
                              counting_job(kafka_bootstrap, name, source, tmp_path / "state"))
    assert run_job(config, "--bounded", timeout=90).returncode == 0
    events = {run: tmp_path / f"events-{run}" for run in ("plain", "submitted")}

    def args(run: str) -> list[str]:
        events[run].mkdir()
        return ["rebuild", "--config", str(config), "--store", "counts", "--out",
                str(tmp_path / run), "--shuffle-partitions", "2",
                "--spark-conf", f"spark.driver.extraJavaOptions={FAST_JVM}",
                "--spark-conf", "spark.eventLog.enabled=true",
                "--spark-conf", "spark.eventLog.compress=false",
                "--spark-conf", f"spark.eventLog.dir=file://{events[run]}"]

    plain = millpond("spark", *args("plain"), timeout=TIMEOUT)
    assert _report(plain)["keys"] == len(expected)
    assert _masters(events["plain"]) == {"local[*]"}

    jars = millpond("spark", "jars", timeout=TIMEOUT)
    assert jars.returncode == 0, jars.stderr
    script = millpond("spark", "submit-script").stdout.strip()
    submitted = subprocess.run(
        [SPARK_SUBMIT, "--master", "local[1]", "--driver-memory", "512m",
         "--jars", jars.stdout.strip(), script, *args("submitted")],
        capture_output=True, text=True, timeout=TIMEOUT,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable})
    assert _report(submitted)["keys"] == len(expected)
    assert _masters(events["submitted"]) == {"local[1]"}

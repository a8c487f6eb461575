"""``millpond spark rebuild`` and ``millpond spark audit`` as a user runs them: the console
script as a subprocess, over the changelog of a real job run.

README: rebuild writes a Parquet snapshot and, with ``--rocksdb-dirs``, store directories a
task adopts; audit compares the changelog's state with "a `millpond store dump --raw` file".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    millpond,
    produce_users,
    read_topic,
    run_job,
    write_properties,
)
from tests.spark.conftest import FAST_JVM, FAST_SQL

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

# The spark fixture's settings, as command-line options.
SPARK_ARGS = ["--master", "local[2]", "--shuffle-partitions", "2",
              "--spark-conf", f"spark.driver.extraJavaOptions={FAST_JVM}",
              *(a for k, v in FAST_SQL.items() for a in ("--spark-conf", f"{k}={v}"))]
SPARK_TIMEOUT = 300


def test_rebuild_and_audit_of_a_raw_dump_from_the_command_line(
    spark: Any, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    expected = produce_users(kafka_bootstrap, source, 2000, 150, 2)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state")
    conf = write_properties(tmp_path / "job.properties", props)
    assert run_job(conf, "--bounded").returncode == 0
    assert dump_store(conf, "counts") == dict(expected)
    changelog = f"{name}-counts-changelog"
    records = read_topic(kafka_bootstrap, changelog)
    shown = json.loads(millpond("checkpoint", "show", "--config", str(conf),
                                "--format", "json").stdout)

    # rebuild: Parquet + adoptable RocksDB directories, its statistics on stdout and in --report.
    snap, adopt, report = tmp_path / "snap", tmp_path / "adopt", tmp_path / "rebuild.json"
    rebuilt = millpond("spark", "rebuild", "--config", str(conf), "--store", "counts",
                       "--out", str(snap), "--at-checkpoint", "--rocksdb-base-dir", str(adopt),
                       "--report", str(report), *SPARK_ARGS, timeout=SPARK_TIMEOUT)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr[-3000:]
    stats = json.loads(rebuilt.stdout)
    assert stats == json.loads(report.read_text())
    assert (stats["store"], stats["topic"], stats["mode"]) == ("counts", changelog, "checkpoint")
    assert stats["keys"] == len(expected) and stats["records_read"] == len(records)
    for p in (0, 1):
        part = stats["partitions"][str(p)]
        assert part["last_offset"] == shown[f"partition-{p}"]["changelogs"]["counts"]
        assert part["records"] == sum(1 for m in records if m.partition() == p)
    rows = spark.read.parquet(str(snap)).collect()
    assert {r["key"]: json.loads(r["value_json"]) for r in rows} == dict(expected)
    assert sorted(stats["rocksdb_dirs"]) == [
        str(adopt / name / "counts" / f"partition-{p}") for p in (0, 1)]
    adopted = write_properties(tmp_path / "adopted.properties", {
        **props, "job.logged.store.base.dir": str(adopt)})
    assert dump_store(adopted, "counts") == dict(expected)

    # audit: the `store dump --raw` output, as is, is the state file.
    dump = millpond("store", "dump", "--config", str(conf), "--store", "counts", "--raw")
    assert dump.returncode == 0, dump.stderr
    state = tmp_path / "dump.jsonl"
    state.write_text(dump.stdout)
    # -XX:+PrintFlagsFinal: the JVM prints ~800 lines to its stdout (as Ivy does on a first
    # run); the command's stdout is still its JSON alone, the JVM's lines go to stderr.
    audited = millpond("spark", "audit", "--config", str(conf), "--store", "counts",
                       "--state", str(state), *SPARK_ARGS, "--spark-conf",
                       f"spark.driver.extraJavaOptions={FAST_JVM} -XX:+PrintFlagsFinal",
                       timeout=SPARK_TIMEOUT)
    assert audited.returncode == 0, audited.stdout + audited.stderr[-3000:]
    assert "PrintFlagsFinal" not in audited.stdout and "PrintFlagsFinal" in audited.stderr
    # Spark's start-up notices are gone; its progress is one labelled line (not a terminal).
    noise = [line for line in audited.stderr.splitlines() if re.search(
        r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN |Using incubator modules|"
        r"default log4j profile|sc\.setLogLevel|clientserver", line)]
    assert noise == [], audited.stderr[-3000:]
    assert re.search(r"^spark audit counts: (\d+)/\1 tasks, done in [\d.]+ s$",
                     audited.stderr, re.M), audited.stderr[-3000:]
    result = json.loads(audited.stdout)
    assert result["ok"] is True and result["state"] == str(state)
    assert result["totals"] == {"matching": len(expected), "missing": 0, "extra": 0,
                                "differing": 0}
    assert sum(p["matching"] for p in result["partitions"].values()) == len(expected)

"""audit() and ``millpond spark audit`` against a real broker and real RocksDB directories."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from millpond.changelog.local import store_dir
from millpond.spark.audit import audit
from millpond.spark.cli import spark as spark_cli
from millpond.spark.rebuild import rebuild
from millpond.stores import RocksDbEngine
from tests.spark.helpers import STORE, ChangelogJob, random_updates, reference

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_audit_passes_then_reports_exactly_the_key_changed_behind_its_back(
    spark: Any, make_job: Callable[..., ChangelogJob]
) -> None:
    job = make_job(partitions=3)
    job.produce(random_updates(job, 300, keys=40, seed=11))
    rebuild(job.config, STORE, None, rocksdb_dirs=True, spark=spark)
    expected = reference(job.records)
    runner = CliRunner()
    args = ["audit", "-c", str(job.config_path), "--store", STORE]

    clean = runner.invoke(spark_cli, args)
    assert clean.exit_code == 0, clean.output
    report = json.loads(clean.stdout)  # the JSON report alone; progress is on stderr
    assert report["ok"] is True
    assert report["totals"] == {"matching": len(expected), "missing": 0, "extra": 0,
                                "differing": 0}

    (partition, key), _ = sorted(expected.items())[0]
    engine = RocksDbEngine(store_dir(job.base_dir, job.name, STORE, partition))
    engine.put(key, b'{"tampered":true}')
    engine.close()

    dirty = runner.invoke(spark_cli, args)
    assert dirty.exit_code == 1, dirty.output
    report = json.loads(dirty.stdout)
    assert report["ok"] is False
    assert report["totals"] == {"matching": len(expected) - 1, "missing": 0, "extra": 0,
                                "differing": 1}
    assert report["partitions"][str(partition)]["differing"] == 1
    [sample] = report["samples"]
    assert sample["status"] == "differing" and sample["partition"] == partition
    assert sample["key"] == key.decode()
    assert json.loads(sample["actual"]) == {"tampered": True}
    assert json.loads(sample["expected"]) == json.loads(expected[(partition, key)][0])


def test_audit_of_a_dump_file_counts_missing_and_extra_keys(
    spark: Any, make_job: Callable[..., ChangelogJob], tmp_path: Path
) -> None:
    job = make_job(partitions=2)
    job.produce(random_updates(job, 120, keys=20, seed=12))
    expected = reference(job.records)
    items = sorted(expected.items())
    dropped = items[0][0]
    lines = [
        json.dumps({"partition": p, "key": base64.b64encode(k).decode(),
                    "value": base64.b64encode(v).decode()})
        for (p, k), (v, _) in items[1:]
    ]
    lines.append(json.dumps({"partition": 0, "key": base64.b64encode(b"ghost").decode(),
                             "value": base64.b64encode(b'{"x":1}').decode()}))
    dump = tmp_path / "dump.jsonl"
    dump.write_text("\n".join(lines) + "\n")

    report = audit(job.config, STORE, dump, spark=spark)

    assert not report.ok
    assert (report.total("missing"), report.total("extra"), report.total("differing")) == (1, 1, 0)
    assert report.total("matching") == len(expected) - 1
    shown = {(s["status"], s["partition"], s["key"]) for s in report.samples}
    assert shown == {("missing", dropped[0], dropped[1].decode()), ("extra", 0, "ghost")}

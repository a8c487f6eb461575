"""Spark over the changelogs of a real job run: rebuild == store dump, tail-only adoption, audit."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from millpond.config import Config
from millpond.stores import RocksDbEngine
from tests.kafka_util import (
    counting_job,
    create_topic,
    dump_store,
    produce_users,
    run_job,
    write_properties,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _restored(log: str) -> int:
    return sum(int(n) for n in re.findall(r"ready: restored (\d+) records", log))


def test_rebuild_adopt_and_audit_a_real_job(
    spark: object, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    from millpond.spark import audit, rebuild

    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    produce_users(kafka_bootstrap, source, 4000, 300, 2)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "live")
    conf = write_properties(tmp_path / "job.properties", props)
    assert run_job(conf, "--bounded").returncode == 0
    config = Config.load(conf)

    # (1) rebuild equals `millpond store dump` of every partition, exactly.
    result = rebuild(config, "counts", tmp_path / "parquet", at_checkpoint=True,
                     rocksdb_dirs=tmp_path / "adopt", spark=spark)  # type: ignore[arg-type]
    rows = spark.read.parquet(str(tmp_path / "parquet")).collect()  # type: ignore[attr-defined]
    rebuilt = {r["key"]: json.loads(r["value_json"]) if r["value_json"] else r["value"]
               for r in rows}
    dumped = dump_store(conf, "counts")
    assert rebuilt == dumped and len(dumped) == 300
    assert result is not None

    # (2) a task on the rebuilt dirs replays only the changelog tail written after them.
    more = produce_users(kafka_bootstrap, source, 1000, 300, 2)
    assert run_job(conf, "--bounded").returncode == 0  # the live job moves on
    tail_keys = len(more)
    adopted = write_properties(tmp_path / "adopted.properties", {
        **props, "job.logged.store.base.dir": str(tmp_path / "adopt")})
    run = run_job(adopted, "--bounded")
    assert run.returncode == 0, run.stderr[-2000:]
    restored = _restored(run.stderr)
    assert 0 < restored <= tail_keys + 2, f"replayed {restored}, tail has <= {tail_keys} keys"
    assert dump_store(adopted, "counts") == dump_store(conf, "counts")

    # (3) audit passes on the healthy store, and names the one key changed behind its back.
    healthy = audit(config, "counts", tmp_path / "live", spark=spark)  # type: ignore[arg-type]
    assert healthy.ok, healthy.to_dict()
    victim = sorted(dumped)[7]
    for part_dir in (tmp_path / "live" / name / "counts").glob("partition-?"):
        engine = RocksDbEngine(part_dir)
        if engine.get(victim.encode()) is not None:
            engine.put(victim.encode(), b"12345")
            engine.flush()
        engine.close()
    shutil.rmtree(tmp_path / "parquet")
    broken = audit(config, "counts", tmp_path / "live", spark=spark)  # type: ignore[arg-type]
    report = broken.to_dict()
    assert not broken.ok
    assert broken.total("differing") == 1 and broken.total("missing") == 0
    assert victim in json.dumps(report["samples"])

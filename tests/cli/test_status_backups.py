"""``millpond status`` for a backed-up store with no snapshot yet, and for stores that are not
backed up (docs/operations/status.md): the table says ``backup none yet``, the JSON's
``backup`` has every field null (``snapshots`` 0, no error); a store that is not backed up
(backups off for the job, or ``stores.<s>.backup.enabled=false``) has ``"backup": null``
and no backup in its table cell. The job ran against the real broker; the bucket is a real
empty ``file://`` location."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import (
    counting_job,
    create_topic,
    millpond,
    produce_users,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 2
NONE_YET = {"snapshot": None, "offset": None, "time": None, "bytes": None, "snapshots": 0,
            "behind": None, "error": None}


def _status(config: Path, *overrides: str, fmt: str = "json") -> str:
    args = [a for o in overrides for a in ("--config-override", o)]
    out = millpond("status", "--config", str(config), *args, "--format", fmt)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_status_shows_none_yet_and_null_backups(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, name = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, PARTITIONS)
    produce_users(kafka_bootstrap, source, 100, 10, PARTITIONS)
    config = write_properties(tmp_path / "job.properties",
                              counting_job(kafka_bootstrap, name, source, tmp_path / "state"))
    out = run_job(config, "--bounded", timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    empty = tmp_path / "bucket"
    empty.mkdir()
    backed_up = f"job.state.backup.uri=file://{empty}"

    # backups on, the bucket empty: none yet, every field null, the rest of the row as ever
    doc = json.loads(_status(config, backed_up))
    assert sorted(r["partition"] for r in doc["partitions"]) == list(range(PARTITIONS))
    for row in doc["partitions"]:
        [store] = row["stores"]
        assert store["backup"] == NONE_YET, store
        assert row["checkpoint"] is not None, row
    rows = [line for line in _status(config, backed_up, fmt="table").splitlines()
            if "counts: " in line]
    assert len(rows) == PARTITIONS and all(r.endswith(", backup none yet") for r in rows), rows

    # not backed up: no backups for the job, or backups off for the store
    for overrides in [(), (backed_up, "stores.counts.backup.enabled=false")]:
        doc = json.loads(_status(config, *overrides))
        for row in doc["partitions"]:
            [store] = row["stores"]
            assert "backup" in store and store["backup"] is None, (overrides, store)
        rows = [line for line in _status(config, *overrides, fmt="table").splitlines()
                if "counts: " in line]
        assert len(rows) == PARTITIONS and not any("backup" in r.split("counts: ")[1] for r in rows), rows

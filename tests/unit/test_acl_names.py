"""``millpond acls`` names only the job's own groups and transactional ids, for every role."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond.config import Config
from millpond.ops.acls import ROLES, required_acls


@pytest.mark.parametrize("role", ROLES)
def test_every_group_and_transactional_id_is_the_jobs(role: str, tmp_path: Path) -> None:
    conf = tmp_path / "job.properties"
    conf.write_text("job.name=counter\njob.id=2\ntask.inputs=kafka.views\n"
                    "systems.kafka.bootstrap.servers=b:9092\nstores.counts.factory=rocksdb\n"
                    "stores.counts.key.serde=string\nstores.counts.msg.serde=json\n"
                    "stores.counts.changelog=kafka.counts-log\n")
    names = {a.name for a in required_acls(Config.load(conf), role)
             if a.resource in ("group", "transactional-id")}
    assert names and all(n == "counter-2" or n.startswith("counter-2-") for n in names), names
    if role == "spark":
        assert {"counter-2-spark", "counter-2-rescale"} <= names

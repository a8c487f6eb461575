"""`millpond status --explain-memory`: the process memory plan of a config, printed by the
real CLI without a broker (the bootstrap address is unreachable on purpose)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.kafka_util import MILLPOND

CONFIG = """\
job.name=memory-plan
task.class=examples.page_view_counter.PageViewCounter
task.inputs=kafka.page-views
systems.kafka.bootstrap.servers=127.0.0.1:1
cluster-manager.container.memory.mb=384
stores.counts.factory=rocksdb
stores.counts.key.serde=string
stores.counts.msg.serde=json
stores.counts.object.cache.max.bytes=1048576
"""


def run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "job.properties"
    path.write_text(CONFIG, encoding="utf-8")
    return subprocess.run([MILLPOND, "status", "--config", str(path), "--explain-memory",
                           *extra], capture_output=True, text=True, timeout=60, check=False)


def test_explain_memory_prints_each_part_and_the_keys_that_changed_it(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "memory budget 384.0 MiB (cluster-manager.container.memory.mb=384)"
    assert any(line.split()[:3] == ["rocksdb", "block", "cache"] and "119.5 MiB" in line
               for line in lines)
    assert any("stores.counts.object.cache.max.bytes" in line and "outside the budget" in line
               for line in lines)
    as_json = json.loads(run(tmp_path, "--format", "json").stdout)
    parts = {p["name"]: p["bytes"] for p in as_json["parts"] if p["in_budget"]}
    assert as_json["budget"] == 384 * 1024 * 1024
    assert sum(b for name, b in parts.items() if not name.startswith(" ")) == as_json["budget"]

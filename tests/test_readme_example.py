"""The README's StreamTask and properties are the real files, and the job works as shown."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import (
    REPO,
    create_topic,
    latest_by_key,
    millpond,
    produce_users,
    read_topic,
    run_job,
)

README = (REPO / "README.md").read_text()


def _block(lang: str, after: str) -> str:
    start = README.index(after)
    match = re.compile(rf"```{lang}\n(.*?)```", re.S).search(README, start)
    assert match, f"no {lang} block after {after!r}"
    return match.group(1)


def test_readme_blocks_are_the_shipped_files() -> None:
    task = (REPO / "examples" / "page_view_counter.py").read_text()
    props = (REPO / "config" / "page-view-counter.properties").read_text()
    assert _block("python", "examples/page_view_counter.py") in task
    for line in _block("properties", "config/page-view-counter.properties").splitlines():
        assert line in props.splitlines(), line


@pytest.mark.kafka
def test_readme_example_runs(kafka_bootstrap: str, topic_name: Callable[[str], str],
                             tmp_path: Path) -> None:
    """The shipped task and properties, on this test's own topics: the output topic does not
    exist beforehand (it is created on first send), the stored counts are exact, and the last
    count emitted for each user equals the stored one."""
    source, sink, name = topic_name("page-views"), topic_name("user-counts"), topic_name("job")
    create_topic(kafka_bootstrap, source, 4)
    expected = produce_users(kafka_bootstrap, source, 2000, 40, 4)
    overrides = [f"job.name={name}", f"task.inputs=kafka.{source}", "task.window.ms=50",
                 f"counts.stream=kafka.{sink}",
                 f"systems.kafka.bootstrap.servers={kafka_bootstrap}",
                 f"job.logged.store.base.dir={tmp_path}",
                 f"stores.page-view-counts.changelog=kafka.{name}-changelog"]
    args = [a for o in overrides for a in ("--config-override", o)]
    config = str(REPO / "config" / "page-view-counter.properties")
    run = run_job(Path(config), "--bounded", *args)
    assert run.returncode == 0, run.stderr[-3000:]
    dump = millpond("store", "dump", "--config", config, "--store", "page-view-counts", *args)
    state = {row["key"]: row["value"] for row in map(json.loads, dump.stdout.splitlines())}
    assert state == dict(expected)
    emitted = {k.decode(): json.loads(v) for k, v in
               latest_by_key(read_topic(kafka_bootstrap, sink)).items()}
    assert emitted == state

"""Changelog generations: the checkpoint's ``topics`` field and the one resolving helper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from millpond.changelog.checkpoint import Checkpoint
from millpond.changelog.errors import GenerationError
from millpond.changelog.generations import (
    job_topics,
    next_generation,
    resolve,
    resolve_all,
    store_topic,
)
from millpond.config import Config


def _config(tmp_path: Path, topic: str = "wc-counts") -> Config:
    lines = ["job.name=wc", "task.class=tests.jobs.counting.Counter", "task.inputs=kafka.in",
             "systems.kafka.bootstrap.servers=127.0.0.1:1",
             "stores.counts.factory=rocksdb", "stores.counts.key.serde=string",
             "stores.counts.msg.serde=json",
             f"stores.counts.changelog=kafka.{topic}",
             "stores.cache.factory=inmemory", "stores.cache.key.serde=string",
             "stores.cache.msg.serde=json"]
    path = tmp_path / "job.properties"
    path.write_text("\n".join(lines) + "\n")
    return Config.load(path)


def test_topics_are_written_only_when_set_and_old_checkpoints_read_as_before() -> None:
    plain = Checkpoint("partition-0", 0, {"in": 5}, {"counts": 9})
    assert "topics" not in json.loads(plain.to_bytes())
    old = b'{"version": 1, "task": "partition-0", "partition": 0, "inputs": {"in": 5}, ' \
          b'"changelogs": {"counts": 9}}'
    assert Checkpoint.from_bytes(old) == plain and Checkpoint.from_bytes(old).topics == {}
    moved = Checkpoint("partition-3", 3, {"in": 0}, {"counts": 2}, topics={"counts": "t-gen2"})
    assert json.loads(moved.to_bytes())["topics"] == {"counts": "t-gen2"}
    assert Checkpoint.from_bytes(moved.to_bytes()) == moved


def test_resolve_prefers_the_checkpoint_topic(tmp_path: Path) -> None:
    config = _config(tmp_path)
    counts = config.stores["counts"]
    assert resolve(config, counts, None) == "wc-counts"
    assert resolve(config, counts, {"other": "x"}) == "wc-counts"
    assert resolve(config, counts, {"counts": "wc-counts-gen2"}) == "wc-counts-gen2"
    ckpts = [Checkpoint(f"partition-{p}", p, topics={"counts": "wc-counts-gen2"})
             for p in range(3)]
    assert resolve_all(config, ckpts) == {"counts": "wc-counts-gen2"}
    assert resolve_all(config, []) == {"counts": "wc-counts"}  # cache has no changelog


def test_generations_of_a_topic(tmp_path: Path) -> None:
    config = _config(tmp_path)
    counts = config.stores["counts"]
    base = resolve(config, counts, None)
    assert base == "wc-counts"
    assert next_generation(config, counts, base) == f"{base}-gen2"
    assert next_generation(config, counts, f"{base}-gen2") == f"{base}-gen3"
    assert next_generation(config, counts, f"{base}-gen41") == f"{base}-gen42"
    # A generation of another topic is not this store's: start again from the base.
    assert next_generation(config, counts, "elsewhere-gen7") == f"{base}-gen2"


def test_checkpoints_that_disagree_are_refused() -> None:
    ckpts = [Checkpoint("partition-0", 0, topics={"counts": "a-gen2"}),
             Checkpoint("partition-1", 1, topics={"counts": "a-gen3"}),
             Checkpoint("partition-2", 2)]
    with pytest.raises(GenerationError, match=r"different changelog topics for store 'counts' "
                       r"\(a-gen2: partition-0; a-gen3: partition-1\)"):
        job_topics(ckpts)
    assert job_topics(ckpts[:1] + ckpts[2:]) == {"counts": "a-gen2"}


def test_default_topic_names_and_what_a_refusal_lists(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert store_topic(config, config.stores["cache"]) == "wc-1-cache-changelog"  # none set
    assert next_generation(config, config.stores["counts"], "elsewhere") == "wc-counts-gen2"
    ckpts = [Checkpoint(f"partition-{p}", p, topics={"counts": "a-gen2"}) for p in range(5)]
    with pytest.raises(GenerationError, match=r"\(a-gen2: partition-0, partition-1, "
                       r"partition-2; a-gen3: partition-9\)"):  # three tasks a topic at most
        job_topics([*ckpts, Checkpoint("partition-9", 9, topics={"counts": "a-gen3"})])

"""Run the shipped example configs against the test broker under unique names."""

from __future__ import annotations

import json
import shutil
import signal
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from millpond.config.properties import load_properties
from millpond.tasks.faults import CRASH_LOG
from tests.kafka_util import REPO, millpond, read_topic, run_job, write_properties

CONFIG_DIR = REPO / "config"


def example_config(name: str, tmp_path: Path, bootstrap: str, topic_name: Callable[[str], str],
                   topics: Mapping[str, str], **overrides: Any) -> Path:
    """``config/<name>.properties`` rewritten for one test; returns the written file.

    ``topics`` renames topics (shipped name -> test's name) wherever a value mentions
    ``kafka.<name>``; the job name, changelogs, state dir, broker and static member id are
    made unique to the test; ``overrides`` (dots spelled as ``__``) are applied last.
    """
    props = dict(load_properties(CONFIG_DIR / f"{name}.properties").items())
    job = topic_name("job")
    for key, value in list(props.items()):
        parts = [p.strip() for p in value.split(",")]
        if any(p.startswith("kafka.") and p[6:] in topics for p in parts):
            props[key] = ",".join(f"kafka.{topics[p[6:]]}" if p[6:] in topics else p
                                  for p in parts)
        if key.startswith("stores.") and key.endswith(".changelog"):
            store = key[len("stores."):-len(".changelog")]
            props[key] = f"kafka.{job}-{store}-changelog"
    props.update({
        "job.name": job,
        "job.logged.store.base.dir": str(tmp_path / "state"),
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.consumer.group.instance.id": f"{job}-1",
    })
    props.update({k.replace("__", "."): v for k, v in overrides.items()})
    return write_properties(tmp_path / f"{name}.properties", props)


def job_name(config: Path) -> str:
    return load_properties(config)["job.name"]


def crash_mid_stream(config: Path, crash_at: str, total_inputs: int) -> dict[int, int]:
    """Run the job until ``MILLPOND_CRASH_AT=<crash_at>:moved`` SIGKILLs it; return the input
    messages each task's last checkpoint covers (asserted to be some but not all in total).

    ``:moved`` makes the kill certain to land mid-stream, with no retry that could hide a
    kill that proved nothing: a commit point counts only commits that move a task's input,
    ``mid-batch`` only batches after this process committed input (tasks that open early
    commit while the first fetch is under way; those commits are not counted)."""
    run = run_job(config, "--bounded", env={"MILLPOND_CRASH_AT": f"{crash_at}:moved"},
                  timeout=60)
    keep_log(config, run.stdout + run.stderr)
    assert run.returncode == -signal.SIGKILL, (
        f"expected a SIGKILL at {crash_at}, got exit {run.returncode}:\n"
        f"{run.stderr[-3000:]}")
    assert f"{CRASH_LOG} {crash_at.split(':')[0]} " in run.stderr, run.stderr[-3000:]
    committed = committed_inputs(config)
    assert 0 < sum(committed.values()) < total_inputs, (
        f"the kill should land mid-stream: {committed} of {total_inputs} inputs committed")
    return committed


def finish(config: Path) -> str:
    """Restart the job and run it to the end of its inputs; returns its log. (Commits every
    second rather than after every batch as in the crash runs: the same result, faster.)"""
    run = run_job(config, "--bounded", "--config-override", "task.commit.ms=1000", timeout=90)
    keep_log(config, run.stdout + run.stderr)
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stderr


def keep_log(config: Path, text: str) -> Path:
    """Save a run's output beside the test's config (``run-1.log``, ``run-2.log``, ...)."""
    n = len(list(config.parent.glob("run-*.log"))) + 1
    path = config.parent / f"run-{n}.log"
    path.write_text(text)
    return path


def committed_inputs(config: Path) -> dict[int, int]:
    """Per task partition, the input messages its checkpoint covers (sum of next offsets)."""
    out = millpond("checkpoint", "show", "--config", str(config), "--format", "json")
    assert out.returncode == 0, out.stderr
    return {int(name.rsplit("-", 1)[1]): sum(ckpt["inputs"].values())
            for name, ckpt in json.loads(out.stdout or "{}").items()}


def dump(config: Path, store: str) -> dict[int, dict[str, Any]]:
    """Every entry of ``store`` per partition, through ``millpond store dump``."""
    out = millpond("store", "dump", "--config", str(config), "--store", store)
    assert out.returncode == 0, out.stdout + out.stderr
    state: dict[int, dict[str, Any]] = defaultdict(dict)
    for line in out.stdout.splitlines():
        row = json.loads(line)
        state[row["partition"]][row["key"]] = row["value"]
    return dict(state)


def merged(state: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One dict of a per-partition dump (keys never repeat across partitions here)."""
    out: dict[str, Any] = {}
    for part in state.values():
        assert not out.keys() & part.keys()
        out.update(part)
    return out


def delete_store_dir(config: Path, store: str, partition: int) -> list[Path]:
    """Remove one task's directory of ``store`` (live and checkpoint) as a lost disk would."""
    props = load_properties(config)
    base = Path(props["job.logged.store.base.dir"]) / props["job.name"] / store
    gone = sorted(base.glob(f"partition-{partition}*"))
    assert gone, f"no directory for {store} partition {partition} under {base}"
    for path in gone:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return gone


def outputs(bootstrap: str, topic: str, isolation: str = "read_committed"
            ) -> list[tuple[str, Any]]:
    """(key, decoded JSON value or None) of every record of ``topic``."""
    return [(m.key().decode(), None if m.value() is None else json.loads(m.value()))
            for m in read_topic(bootstrap, topic, isolation)]


def latest_by_key(records: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """At-least-once outputs deduplicated by key; a key's copies must all agree."""
    seen: dict[str, list[Any]] = defaultdict(list)
    for key, value in records:
        if value not in seen[key]:
            seen[key].append(value)
    conflicting = {k: v for k, v in seen.items() if len(v) > 1}
    assert not conflicting, f"keys sent with different values: {list(conflicting.items())[:3]}"
    return {k: v[0] for k, v in seen.items()}

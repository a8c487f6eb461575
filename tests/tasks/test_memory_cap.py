"""A job under a real memory cap (a cgroup of 96 MiB) with `job.container.memory.mb=96` and
nothing else: a read-then-write store of ~4 KB values over 4x the cap is built, restarted
with updates (random reads from RocksDB), restored by `millpond restore` and by `run`, and
stays exact, never OOM-killed.

Skipped only where no cgroup is writable (failing under CI=true where a cgroup memory
controller exists). Slow (about a minute and a half on 2 cores): marked ``slow``."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import AccessType, Options, Rdict

from benchmarks import memory_cap
from millpond.dev.cgroup import MemoryCgroup
from tests.kafka_util import MILLPOND, REPO, create_topic, write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

MiB = 1024 * 1024
CAP_MB = 96
KEYS = 100_000  # x ~4 KB: ~400 MiB of RocksDB files, over 4x the cap
UPDATES = 10_000


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    try:
        group = MemoryCgroup.make(CAP_MB * MiB)
    except OSError as exc:
        if os.environ.get("CI") == "true" and MemoryCgroup.exists():
            pytest.fail(f"this machine has a cgroup memory controller but no writable "
                        f"cgroup: {exc}")
        pytest.skip(f"no writable cgroup (v1 or v2) on this machine: {exc}")
    yield group
    group.close()


VALUE_BYTES = 4_000  # 4 KB values make the store 4x the cap with a quarter of 1 KB's messages


def body(key: str, version: int) -> str:
    """~4 KB of incompressible text, the same for the same key and version (the
    benchmark's, which :func:`produce` wrote)."""
    return memory_cap.body(key, version, VALUE_BYTES)


def produce(bootstrap: str, topic: str, keys: list[str], versions: Counter[str]) -> None:
    """One message per entry of ``keys``, each the key's next version (the benchmark's)."""
    memory_cap.produce(bootstrap, topic, keys, versions, VALUE_BYTES)


def store_dir(state: Path) -> Path:
    found = [p.parent for p in state.rglob("CURRENT") if p.parent.name.startswith("partition-")
             and not p.parent.name.endswith(".checkpoint")]
    assert len(found) == 1, found
    return found[0]


def check_exact(state: Path, versions: Counter[str]) -> None:
    """Every key with its last version's body and its number of versions, nothing else."""
    opts = Options(raw_mode=True)
    db = Rdict(str(store_dir(state)), opts, access_type=AccessType.read_only())
    try:
        seen = 0
        for raw_key, raw in db.items():
            key = raw_key.decode()
            doc = json.loads(raw)
            assert doc == {"n": versions[key], "body": body(key, versions[key])}, key
            seen += 1
        assert seen == len(versions)
    finally:
        db.close()


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_a_store_4x_the_cap_builds_restarts_and_restores_exact_inside_it(
    cgroup: MemoryCgroup, kafka_bootstrap: str, topic_name, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    name = topic_name("docs")
    inputs = f"{name}-in"
    create_topic(kafka_bootstrap, inputs, 1)
    state = tmp_path / "state"
    config = write_properties(tmp_path / "job.properties", {
        "job.name": name,
        "task.class": "tests.jobs.documents.DocumentWriter",
        "task.inputs": f"kafka.{inputs}",
        "task.commit.ms": 2000,
        "job.container.memory.mb": CAP_MB,
        "systems.kafka.bootstrap.servers": kafka_bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "stores.docs.factory": "rocksdb",
        "stores.docs.key.serde": "string",
        "stores.docs.msg.serde": "json",
        "stores.docs.changelog": f"kafka.{name}-docs-changelog",
        "job.logged.store.base.dir": str(state),
    })
    keys = [f"doc-{i:07d}" for i in range(KEYS)]
    versions: Counter[str] = Counter()
    produce(kafka_bootstrap, inputs, keys, versions)
    rng = random.Random(7)
    runs = []

    def capped(*args: str) -> None:
        done = cgroup.run([MILLPOND, *args, "--config", str(config)], REPO, timeout=600,
                          log_dir=tmp_path)
        runs.append((args[0], done.peak_anon, done.peak_file))
        assert done.oom_kills == 0 and done.returncode == 0, (args, done.returncode,
                                                              done.output[-3000:])
        # Anonymous memory is the process's own (file pages are libraries, mostly charged
        # where they were first read); the cgroup's charge (its page cache included) is
        # what the cap holds, and it held: no OOM kill.
        assert done.peak_anon <= CAP_MB * MiB, done

    capped("run", "--bounded")  # build: every get a miss, every put a new 1 KB document
    assert size_of(store_dir(state)) >= 4 * CAP_MB * MiB
    produce(kafka_bootstrap, inputs, rng.choices(keys, k=UPDATES), versions)
    capped("run", "--bounded")  # restart on the local store: random reads of old documents
    check_exact(state, versions)
    shutil.rmtree(state)
    capped("restore")  # the whole changelog, offline
    check_exact(state, versions)
    shutil.rmtree(state)
    produce(kafka_bootstrap, inputs, rng.choices(keys, k=UPDATES), versions)
    capped("run", "--bounded")  # restore inside the run, then more random reads
    check_exact(state, versions)
    print("peak RSS per run, anon + file (MiB):",
          [(what, round(anon / MiB, 1), round(file / MiB, 1)) for what, anon, file in runs])

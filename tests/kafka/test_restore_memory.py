"""A restore stays inside the job's memory budget: the restore consumer's fetch responses
come from the memory plan.

librdkafka turns every record of a fetch response into a queued op of ~450 B, whatever its
``queued.min.messages``; a response of small records is ~11x its size in ops. With the 16 MiB
fetches (8 MiB a partition) the restore consumer had, `millpond restore` of 1M small records
peaked at ~187 MiB in a job of ``job.container.memory.mb=128``; with the plan's (a quarter of
the restore prefetch share: 1 MiB, 512 KiB a partition) ~85 MiB. Measured here on the real
broker, both ways, from the restore process's own peak RSS."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.kafka_util import MILLPOND, REPO, create_topic, write_properties

pytestmark = pytest.mark.kafka

RECORDS = 1_000_000
BUDGET_MB = 128
MiB = 1024 * 1024
# Run the restore as the only child of a small Python, which prints its peak RSS (KiB).
PEAK = ("import resource, subprocess, sys; "
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "sys.stderr.write(r.stdout + r.stderr); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")


def _restore(config: Path, *overrides: str) -> tuple[int, str]:
    """Peak RSS in bytes of a full `millpond restore`, and what it printed."""
    args = [f"--config-override={o}" for o in overrides]
    done = subprocess.run([sys.executable, "-c", PEAK, MILLPOND, "restore", "--config",
                           str(config), "--full", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip()) * 1024, done.stderr


def test_a_restore_of_small_records_stays_inside_the_budget(
        kafka_bootstrap: str, topic_name: Any, tmp_path: Path) -> None:
    name = f"restore-memory-{uuid.uuid4().hex[:8]}"
    source, changelog = topic_name("in"), topic_name("changelog")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, changelog, 1, **{"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 50,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": RECORDS})
    for i in range(RECORDS):
        producer.produce(changelog, key=b"user-%08d" % i, value=b"%d" % (i % 1000), partition=0)
        if i % 50_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    config = write_properties(tmp_path / "job.properties", {
        "job.name": name,
        "task.class": "tests.jobs.counting.Counter",
        "task.inputs": f"kafka.{source}",
        "task.processing.guarantee": "at-least-once",  # replays to the changelog's end
        "systems.kafka.bootstrap.servers": kafka_bootstrap,
        "stores.counts.factory": "rocksdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "json",
        "stores.counts.changelog": f"kafka.{changelog}",
        "job.logged.store.base.dir": str(tmp_path / "state"),
        "job.container.memory.mb": BUDGET_MB,
    })

    planned, out = _restore(config)
    assert f"{RECORDS:,}" in out or str(RECORDS) in out, out  # every record restored
    # The restore consumer's former fetch sizes, the user's keys (which win over the plan)
    unbounded, out_before = _restore(config, "systems.kafka.consumer.fetch.max.bytes=16777216",
                                     "systems.kafka.consumer.max.partition.fetch.bytes=8388608")
    assert str(RECORDS) in out_before.replace(",", ""), out_before
    print(f"peak {planned / MiB:.0f} MiB, {unbounded / MiB:.0f} MiB with 16 MiB fetches")
    assert planned <= BUDGET_MB * MiB, f"peak {planned / MiB:.0f} MiB over {BUDGET_MB} MiB"
    assert unbounded > planned + 50 * MiB, (  # what the plan's fetch sizes prevent
        f"peak {unbounded / MiB:.0f} MiB with 16 MiB fetches, {planned / MiB:.0f} MiB without")

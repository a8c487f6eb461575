"""Processes of one job starting together each run the start-up ACL check: their
transactional-id probes must not wait on each other. With one shared probe id
(``<group>-check``) the second registration met the first one's (CONCURRENT_TRANSACTIONS) and
librdkafka retried it for 0.5-1.1 s: one of the processes started up to a second late."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from millpond.config import Config
from millpond.config.properties import parse_properties
from millpond.job import Job
from millpond.ops.check import _transactional_ids as transactional_ids
from millpond.ops.check import probe_transactional_id

pytestmark = pytest.mark.kafka

STARTS = 4  # processes starting at once, three times over


def _job(bootstrap: str, name: str) -> Job:
    return Job(Config.from_properties(parse_properties(
        f"job.name={name}\ntask.class=tests.jobs.counting.Counter\ntask.inputs=kafka.in\n"
        f"systems.kafka.bootstrap.servers={bootstrap}\n", "job.properties")))


def test_each_check_probes_its_own_transactional_id() -> None:
    ids = {probe_transactional_id("g-") for _ in range(100)}
    assert len(ids) == 100 and all(i.startswith("g-check-") for i in ids)  # the ACL's prefix


def _probe_together(jobs: list[Job]) -> float:
    """Each job's transactional-id probe, all at once (the step of the check that registers
    an id, as each process's check does at its start); the slowest one's seconds."""
    took: dict[int, float] = {}
    errors: list[BaseException] = []
    gate = threading.Barrier(len(jobs))

    def probe(i: int) -> None:
        gate.wait(10)
        began = time.monotonic()
        try:
            assert transactional_ids(jobs[i], f"{jobs[i].group_id}-") == {"Write", "Describe"}
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        took[i] = time.monotonic() - began

    threads = [threading.Thread(target=probe, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return max(took.values())


def test_processes_starting_together_check_without_waiting_on_each_other(
        kafka_bootstrap: str, topic_name: Callable[[str], str],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "millpond.kafka")
    name = topic_name("job")
    jobs = [_job(kafka_bootstrap, name) for _ in range(STARTS)]  # one job's processes
    # three rounds: a later one registers ids again while the earlier ones' are known
    slowest = max(_probe_together(jobs) for _ in range(3))
    # What a shared probe id did: librdkafka's "Failed to acquire transactional PID ...
    # another concurrent operation on the same transaction ...: retrying", then 0.5-1.1 s.
    clashes = [r.getMessage() for r in caplog.records if "concurrent operation" in r.getMessage()]
    assert not clashes, f"the checks' probes met (slowest {slowest:.2f} s): {clashes[0]}"

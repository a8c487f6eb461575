"""Issue #33's acceptance on the real broker: three processes of one job serve a 100k-key
store; every key is answered right through each process, a range and a prefix equal the
counts, queries during the rebalance and the restores that follow a join answer right or
503 (never a wrong count), and a killed process's keys answer 503 and then the right count
once its tasks moved. Slow (a minute or two): ``make test-slow``."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path

import pytest

from millpond.partitioner import partition_of
from tests.kafka_util import (
    OutputLines,
    counting_job,
    create_topic,
    write_properties,
)
from tests.query.processes import PARTITIONS, fetch, produce, scan, start

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

KEYS = 100_000
MESSAGES = 150_000  # every user once, half of them twice
BATCH = 1_000  # keys per get-many (the endpoint's bound)
READY = " ready: restored "


def ask_all(base: str, users: list[str], expected: Counter[str],
            asked_at: list[tuple[float, float]] | None = None,
            exact: bool = True) -> tuple[int, int, set[str]]:
    """Every user's count through ``base`` in get-many batches: (keys answered with their
    expected count, 503s, the endpoints that served). Fails on any status but 200/503, and
    on a 200 with a count over the expected one, or (``exact``: the job has counted every
    message) any count but the expected one."""
    answered = unavailable = 0
    served: set[str] = set()
    for i in range(0, len(users), BATCH):
        batch = users[i:i + BATCH]
        began = time.time()
        status, body, by = fetch(f"{base}/stores/counts/get-many?"
                                 + urllib.parse.urlencode([("key", u) for u in batch]))
        if asked_at is not None:  # (a batch routed to a restoring owner may wait through it)
            asked_at.append((began, time.time()))
        if status == 503:
            unavailable += 1
            continue
        assert status == 200, (status, body)
        got = {e["key"]: e["value"] for e in body["entries"]}
        wrong = [(u, got.get(u), expected[u]) for u in batch if got.get(u) != expected[u]]
        assert not (exact and wrong), (base, wrong[:5])
        assert all(got[u] <= expected[u] for u in got), (base, wrong[:5])
        if wrong:
            continue
        answered += len(batch)
        served |= set(by.split(", "))
    return answered, unavailable, served


def settle(bases: list[str], users: list[str], expected: Counter[str], served: set[str],
           timeout: float, exact: bool = True, every: bool = True) -> int:
    """Ask a sample of the keys (every 50th) through each of ``bases`` until each answers
    them all, served by ``served`` (``every``: all of them; else some of them); then every
    key through each base once, which must answer all of them. The 503s met on the way."""

    def right(by: set[str]) -> bool:
        return by == served if every else bool(by) and by <= served

    deadline = time.monotonic() + timeout
    sample = users[::50]
    unavailable, last = 0, None
    while True:
        assert time.monotonic() < deadline, f"never every key through {bases} from {served}: {last}"
        done = True
        for base in bases:
            n, u, by = ask_all(base, sample, expected, exact=exact)
            unavailable += u
            last = (base, n, u, by)
            done = done and n == len(sample) and right(by)
        if done:
            break
    for base in bases:
        n, u, by = ask_all(base, users, expected, exact=exact)
        assert (n, u) == (len(users), 0) and right(by), (base, n, u, by)
    return unavailable


def test_three_processes_answer_a_100k_key_store_through_rebalances_restores_and_a_kill(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    name = f"query-accept-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, name, partitions=PARTITIONS)
    expected = produce(kafka_bootstrap, name, MESSAGES, KEYS)
    users = sorted(expected)
    assert len(users) == KEYS
    procs: list[tuple[subprocess.Popen[str], OutputLines]] = []

    events = tmp_path / "restores.txt"
    events.touch()

    def launch(n: int) -> str:
        # Its own state dir: a partition that moves to it is restored from the changelog,
        # each store partition's restore held 4 s at its start so queries meet it.
        config = write_properties(tmp_path / f"job-{n}.properties", counting_job(
            kafka_bootstrap, name, name, tmp_path / f"state-{n}",
            **{"job.query.address": "127.0.0.1:0",
               "systems.kafka.consumer.session.timeout.ms": 6000,
               "systems.kafka.consumer.group.instance.id": f"{name}-{n}",
               "task.restore.listener.class": "tests.jobs.two_stores.TimedRestoreListener"}))
        proc, out, base = start(config, None, env={  # static: the config's instance id
            "MILLPOND_TEST_EVENTS": str(events), "MILLPOND_TEST_RESTORE_START_DELAY": "4.0"})
        procs.append((proc, out))
        return base

    try:
        a = launch(1)
        settle([a], users, expected, {a}, timeout=240, exact=False)  # it counts all alone

        # Two more join: the group rebalances and each restores what it was given from the
        # changelog, while every key is asked through the first process again and again.
        b, c = launch(2), launch(3)
        asked_at: list[tuple[float, float]] = []
        unavailable = 0
        deadline = time.monotonic() + 240
        while not all(READY in out.so_far() for _, out in procs[1:]):
            assert time.monotonic() < deadline, [out.so_far()[-2000:] for _, out in procs]
            unavailable += ask_all(a, users, expected, asked_at)[1]
        unavailable += settle([a, b, c], users, expected, {a, b, c}, timeout=240)
        # The queries met the restores: in flight while a joiner restored a partition (the
        # listener's start/end times), and the joiners restored records.
        windows = restore_windows(events)
        assert windows and any(w[2] > 0 for w in windows), windows
        during = [(t0, t1) for t0, t1 in asked_at
                  if any(t0 <= end and start <= t1 for start, end, _ in windows)]
        assert during, (asked_at[:3], asked_at[-3:], windows)

        for base in (a, b, c):  # a range and a prefix over every partition, in key order
            assert scan(f"{base}/stores/counts/range?from=user-1&to=user-2&limit=5000") == [
                (u, expected[u]) for u in users if "user-1" <= u < "user-2"]
            assert scan(f"{base}/stores/counts/prefix?prefix=user-42&limit=50") == [
                (u, expected[u]) for u in users if u.startswith("user-42")]

        owned = owned_by(b, users)
        held = [u for u in users if partition_of(u.encode(), PARTITIONS) in owned]
        # The second process dies: its keys answer 503 (its endpoint is gone, or the tasks
        # are moving or restoring) and then the right count from whoever took them over.
        victim, _ = procs[1]
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(30) == -signal.SIGKILL
        assert held, "the killed process held no partition"
        after_kill = settle([a, c], held, expected, {a, c}, timeout=240, every=False)
        assert after_kill > 0, "its keys never answered 503 after the kill"
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
    for proc, out in (procs[0], procs[2]):
        assert proc.returncode == 0, out.text()[-3000:]
    print(f"{len(during)} queries during restores; 503s during the joins: {unavailable}, "
          f"after the kill: {after_kill}")


def restore_windows(events: Path) -> list[tuple[float, float, int]]:
    """(start, end, records) of each store partition's restore, from the listener's file."""
    started: dict[tuple[str, str, str], float] = {}
    out = []
    for line in events.read_text().splitlines():
        at, pid, event, store, partition, records = line.split()
        if event == "start":
            started[(pid, store, partition)] = float(at)
        else:
            out.append((started.pop((pid, store, partition)), float(at), int(records)))
    return out


def owned_by(base: str, users: list[str]) -> set[int]:
    """The partitions whose keys ``base`` answers itself (the served-by header names it)."""
    owned = set()
    for p in range(PARTITIONS):
        user = next(u for u in users if partition_of(u.encode(), PARTITIONS) == p)
        status, body, by = fetch(f"{base}/stores/counts/{p}/get?key={user}")
        assert status == 200, body
        if by == base:
            owned.add(p)
    return owned

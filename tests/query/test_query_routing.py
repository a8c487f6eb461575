"""Routing on the real broker: two processes of one job each answer every key (the key's
partition found with the job's partitioner, its owner from the group), saying which process
answered, and each one's /status lists both processes with their tasks (asking the other's
/status/process); after one stops, the survivor answers every key."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millpond.partitioner import partition_of
from tests.kafka_util import counting_job, create_topic, write_properties
from tests.query.processes import PARTITIONS, fetch, produce, scan, start

pytestmark = pytest.mark.kafka

def many(base: str, users: list[str]) -> str:
    return f"{base}/stores/counts/get-many?" + urllib.parse.urlencode(
        [("key", u) for u in users])


def wait_until_answered(base: str, expected: Counter[str], served_by: set[str],
                        timeout: float, exact: bool = False) -> None:
    """Poll a key-routed get-many of every key at ``base`` until it answers the expected
    counts, served by exactly ``served_by``; never a wrong value on a 200 (``exact``: the
    job has counted everything, so a 200 is the expected counts or it is stale)."""
    users = sorted(expected)
    deadline = time.monotonic() + timeout
    seen: Any = None
    while time.monotonic() < deadline:
        status, body, by = fetch(many(base, users))
        seen = (status, by, body)
        if status != 200:
            assert status == 503, body
            continue
        got = {e["key"]: e["value"] for e in body["entries"]}
        assert all(got[u] <= expected[u] for u in got), body  # never more than was sent
        if exact:
            assert got == dict(expected) and body["missing"] == [], body
        if got == dict(expected) and set(by.split(", ")) == served_by:
            return
    raise AssertionError(f"{base} never answered every key from {served_by}: {seen}")


def wait_for_status(base: str, urls: set[str], timeout: float = 60) -> None:
    """Poll ``base``'s /status until it lists exactly the processes ``urls`` (each asked by
    ``base``'s server), holding every partition open between them, each once."""
    deadline = time.monotonic() + timeout
    seen: Any = None
    while time.monotonic() < deadline:
        status, body, _ = fetch(f"{base}/status")
        assert status == 200, body
        held = {p["url"]: sorted(t["partition"] for t in p.get("tasks", [])
                                 if t["state"] == "open") for p in body["processes"]}
        seen = (held, [p.get("error") for p in body["processes"]])
        if set(held) == urls and sorted(sum(held.values(), [])) == list(range(PARTITIONS)) \
                and len({p["pid"] for p in body["processes"]}) == len(urls):
            return
        time.sleep(0.2)
    raise AssertionError(f"{base}/status never listed {urls} holding every partition: {seen}")


@pytest.mark.slow  # 35 s each: its own target keeps make test under 20 min
@pytest.mark.timeout(600)
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL],
                         ids=["stopped", "killed"])
def test_any_process_answers_any_key_and_the_survivor_all(
        kafka_bootstrap: str, tmp_path: Path, stop_signal: signal.Signals) -> None:
    name = f"query-route-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, name, partitions=PARTITIONS)
    config = write_properties(tmp_path / "job.properties", counting_job(
        kafka_bootstrap, name, name, tmp_path / "state",
        **{"job.query.address": "127.0.0.1:0",
           "systems.kafka.consumer.session.timeout.ms": 6000}))
    expected = produce(kafka_bootstrap, name, 2000, 40)
    first, first_out, a = start(config, 1)
    second, second_out, b = start(config, 2)
    try:
        for base in (a, b):  # both hold partitions: each endpoint forwards to the other
            wait_until_answered(base, expected, {a, b}, timeout=120)
        for base in (a, b):  # the page's /status: both processes, each asked by the server
            wait_for_status(base, {a, b})
        answered_by: set[str] = set()
        for user in sorted(expected):
            p = partition_of(user.encode(), PARTITIONS)
            for url in (f"{a}/stores/counts/get?key={user}", f"{b}/stores/counts/get?key={user}",
                        f"{a}/stores/counts/{p}/get?key={user}",
                        f"{b}/stores/counts/{p}/get?key={user}"):
                status, body, by = fetch(url)
                assert status == 200, (url, body)
                assert (body["partition"], body["key"], body["value"], body["found"]) == (
                    p, user, expected[user], True), (url, body)
                answered_by.add(by)
        assert answered_by == {a, b}
        for base in (a, b):  # a range and a prefix over every partition, merged in key order
            assert scan(f"{base}/stores/counts/range?limit=7") == sorted(expected.items())
            assert scan(f"{base}/stores/counts/prefix?prefix=user-1&limit=4") == sorted(
                (u, n) for u, n in expected.items() if u.startswith("user-1"))

        second.send_signal(stop_signal)
        assert second.wait(60) == (0 if stop_signal == signal.SIGTERM else -signal.SIGKILL), \
            second_out.text()[-3000:]
        # The survivor takes the stopped process's partitions over (once the group's session
        # timeout drops a killed or static member; restoring them from the changelogs) and
        # then answers every key itself; until then a clear 503, never an old count.
        wait_until_answered(a, expected, {a}, timeout=120, exact=True)
        assert scan(f"{a}/stores/counts/range?limit=9") == sorted(expected.items())
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
    assert first.returncode == 0, first_out.text()[-3000:]

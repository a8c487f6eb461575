"""Helpers of the query endpoint's tests on the real broker: a counting job with an
endpoint, its address from the log, GETs (with the token), polls and scans through the
continuation tokens."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from tests.kafka_util import (
    counting_job,
    create_topic,
    hash_partition,
    wait_for_line,
    write_properties,
)
from tests.query.processes import ENDPOINT


def get(url: str, token: str | None = None) -> tuple[int, Any]:
    """(status, JSON body) of a GET (with the endpoint's ``token``, if given)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def endpoint(proc: subprocess.Popen[str]) -> str:
    lines = wait_for_line(proc, "query endpoint on", timeout=60)
    found = ENDPOINT.search(lines[-1])
    assert found, lines[-1]
    return found.group(1)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    return out


def expected_by_partition(expected: Counter[str], partitions: int) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {p: {} for p in range(partitions)}
    for user, n in expected.items():
        out[hash_partition(user, partitions)][user] = n
    return out


def many_url(base: str, partition: int, users: list[str]) -> str:
    keys = "&".join(f"key={u}" for u in users)
    return f"{base}/stores/counts/{partition}/get-many?{keys}"


def wait_for_counts(base: str, partition: int, want: dict[str, int], timeout: float,
                    token: str | None = None) -> None:
    """Poll the endpoint (each request waits for a run loop iteration) until the partition's
    counts are ``want``."""
    users = sorted(want)
    deadline = time.monotonic() + timeout
    got: Any = None
    while time.monotonic() < deadline:
        status, got = get(many_url(base, partition, users), token)
        if status == 200 and {e["key"]: e["value"] for e in got["entries"]} == want:
            assert got["missing"] == []
            return
    raise AssertionError(f"partition {partition} never answered the expected counts: {got}")


def scan(base: str, url: str, answered: bool = True) -> tuple[list[tuple[str, int]], int]:
    """Every entry of a scan through its continuation tokens, and the pages it took
    (``answered=False``: nothing, 0 if a page is not answered 200)."""
    out: list[tuple[str, int]] = []
    pages = 0
    token = None
    while True:
        status, body = get(url + (f"&next={token}" if token else ""))
        if status != 200 and not answered:
            return [], 0
        assert status == 200, body
        pages += 1
        out += [(e["key"], e["value"]) for e in body["entries"]]
        token = body["next"]
        if token is None:
            return out, pages


def query_job(bootstrap: str, tmp_path: Path, prefix: str, partitions: int,
              **extra: Any) -> tuple[str, Path]:
    """A new input topic and the counting job's config over it, with an endpoint on a free
    port (``extra``: more keys): the topic's name and the config's path."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, partitions=partitions)
    return name, write_properties(tmp_path / "job.properties", counting_job(
        bootstrap, name, name, tmp_path / "state",
        **{"job.query.address": "127.0.0.1:0", **extra}))

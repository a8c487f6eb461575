"""Helpers of the query endpoint's tests on the real broker: a counting job with an
endpoint, its address from the log, GETs (with the token), polls and scans through the
continuation tokens."""

from __future__ import annotations

import signal
import subprocess
import time
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
from tests.query.processes import ENDPOINT, fetch


def get(url: str, token: str | None = None) -> tuple[int, Any]:
    """(status, JSON body) of a GET (with the endpoint's ``token``, if given)."""
    status, body, _ = fetch(url, token)
    return status, body


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


def query_job(bootstrap: str, tmp_path: Path, prefix: str, partitions: int,
              **extra: Any) -> tuple[str, Path]:
    """A new input topic and the counting job's config over it, with an endpoint on a free
    port (``extra``: more keys): the topic's name and the config's path."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, partitions=partitions)
    return name, write_properties(tmp_path / "job.properties", counting_job(
        bootstrap, name, name, tmp_path / "state",
        **{"job.query.address": "127.0.0.1:0", **extra}))

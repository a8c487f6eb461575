"""``millpond query`` against a running job on the real broker: found through the job's
group, with the token from the environment; pages followed or resumed; its exit codes."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.kafka_util import millpond, produce_users, start_job
from tests.query.helpers import (
    endpoint,
    expected_by_partition,
    query_job,
    stop,
    wait_for_counts,
)

pytestmark = pytest.mark.kafka

TOKEN = {"MILLPOND_QUERY_TOKEN": f"t-{uuid.uuid4().hex}"}


def query(config: Path, *args: str, env: dict[str, str] | None = None,
          ) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    """``millpond query --config config ARGS``: the run and its JSON lines."""
    done = millpond("query", "--config", str(config), *args, timeout=60,
                    env=TOKEN if env is None else env)
    lines = [json.loads(line) for line in done.stdout.splitlines()] if done.returncode == 0 \
        else []
    return done, lines


@pytest.mark.slow  # 10-25 s (a dozen commands); docs/operations/queries.md runs basic ones
def test_millpond_query_reads_a_running_job(kafka_bootstrap: str, tmp_path: Path) -> None:
    name, config = query_job(kafka_bootstrap, tmp_path, "query-cli", 2,
                             **{"job.query.token": "${MILLPOND_QUERY_TOKEN}"})
    expected = produce_users(kafka_bootstrap, name, 600, 40, 2)
    proc = start_job(config, env=TOKEN)
    try:
        base = endpoint(proc)
        want = expected_by_partition(expected, 2)
        for p in (0, 1):
            wait_for_counts(base, p, want[p], timeout=90, token=TOKEN["MILLPOND_QUERY_TOKEN"])
        # No --endpoint: found in the group's members (the job listens on a port it picked).
        done, lines = query(config, "get", "counts", "user-3", "nobody", "user-12")
        assert done.returncode == 0, done.stderr
        assert sorted(lines, key=str) == sorted([
            {"key": "user-3", "value": expected["user-3"]},
            {"key": "user-12", "value": expected["user-12"]},
            {"key": "nobody", "found": False}], key=str)
        done, lines = query(config, "range", "counts", "--limit", "7", "--all")
        assert done.returncode == 0, done.stderr
        assert [(e["key"], e["value"]) for e in lines] == sorted(expected.items())
        done, first = query(config, "--endpoint", "http://127.0.0.1:9", "--endpoint", base,
                            "range", "counts", "--from", "user-1", "--to", "user-3",
                            "--limit", "5")  # the first endpoint is down: the next answers
        assert done.returncode == 0, done.stderr
        assert len(first) == 6 and set(first[-1]) == {"next"}, first
        done, rest = query(config, "range", "counts", "--from", "user-1", "--to", "user-3",
                           "--next", first[-1]["next"], "--all")
        assert done.returncode == 0, done.stderr
        assert [(e["key"], e["value"]) for e in first[:-1] + rest] == sorted(
            (u, n) for u, n in expected.items() if "user-1" <= u < "user-3")
        committed = {u: n for u, n in want[1].items() if u.startswith("user-2")}
        deadline = time.monotonic() + 30
        while True:  # the job commits every 300 ms: soon all of it
            done, lines = query(config, "--committed", "--partition", "1", "prefix", "counts",
                                "user-2", "--all")
            assert done.returncode == 0, done.stderr
            if {e["key"]: e["value"] for e in lines} == committed:
                break
            assert time.monotonic() < deadline, lines

        # Refused requests exit 2, no answer exits 1: each with one Error: line.
        for args, env, code, needle in [
                (("get", "nope", "a"), None, 2, "answered 404: unknown store 'nope'"),
                (("get", "counts", "a"), {"MILLPOND_QUERY_TOKEN": "wrong"}, 2, "answered 401"),
                (("--endpoint", "http://127.0.0.1:9", "get", "counts", "a"), None, 1,
                 "no query endpoint of the job answered"),
                (("--partition", "5", "get", "counts", "a"), None, 1, "answered 503")]:
            done, _ = query(config, *args, env=env)
            assert done.returncode == code and needle in done.stderr, (args, done.stderr)
    finally:
        if proc.poll() is None:
            stop(proc)


def test_a_bad_config_or_no_running_job_is_one_error_line(kafka_bootstrap: str,
                                                          tmp_path: Path) -> None:
    conf = tmp_path / "bad.properties"
    conf.write_text("job.name=bad\ntask.class=tests.jobs.counting.Counter\n"
                    "task.commit.ms=soon\ntask.inputs=kafka.in\n")
    done, _ = query(conf, "get", "counts", "a")
    assert done.returncode == 2 and f"{conf}:3" in done.stderr, done.stderr
    _, config = query_job(kafka_bootstrap, tmp_path, "query-cli-idle", 1,
                          **{"job.query.address": ""})  # not running, no endpoint
    done, _ = query(config, "range", "counts")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == ["Error: no process of the job publishes a query "
                                        "endpoint (is the job running with "
                                        "job.query.address?); give one with --endpoint"]

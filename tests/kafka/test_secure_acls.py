"""``millpond acls`` is enough: a principal granted exactly what it prints for a role can do
that role's work on a secured broker (ACLs on, nothing allowed without one), and nothing more
is needed. The job runs, is SIGKILLed, restarts and ends exact; the read-only commands and the
operator's commands each run as a principal of their own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SecureKafka
from tests.kafka.secure_util import (
    PASSWORD_VAR,
    change_acl,
    create_input,
    new_user,
    run_as,
    secured_job,
)
from tests.kafka_util import MILLPOND, REPO, state_diff, wait_for_line, write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.secure]

PARTITIONS = 2


def millpond(conf: Path, password: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_as(password, *args, "--config", str(conf))


def grant_role(kafka: SecureKafka, conf: Path, password: str, role: str, user: str) -> int:
    """Grant ``user`` what ``millpond acls --role ROLE --format json`` prints; their count."""
    out = millpond(conf, password, "acls", "--role", role, "--format", "json")
    assert out.returncode == 0, out.stderr
    acls = json.loads(out.stdout)[role]
    for acl in acls:
        change_acl(kafka, f"User:{user}", acl)
    return len(acls)


def test_the_printed_acls_are_enough_for_the_job_the_cli_and_the_operator(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    expected = create_input(secure_kafka, source, PARTITIONS, 4000, 40)
    confs: dict[str, tuple[Path, str]] = {}
    for role in ("job", "cli", "operator"):
        user, password = new_user(secure_kafka, f"{role}-{name[-8:]}")
        conf = write_properties(tmp_path / f"{role}.properties", secured_job(
            secure_kafka, secure_kafka.user_config(user, password), name, source,
            tmp_path / "state"))
        assert grant_role(secure_kafka, conf, password, role, user) > 0
        confs[role] = (conf, password)

    conf, password = confs["job"]
    # Commit often and SIGKILL once the job has committed: the restart reopens its tasks
    # (init_transactions fences the dead owner, checkpoints are read back) with the same ACLs.
    job = subprocess.Popen([MILLPOND, "run", "--config", str(conf), "--config-override",
                            "task.commit.ms=100"], cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           env={**os.environ, PASSWORD_VAR: password})
    try:
        wait_for_line(job, " ready: restored ", timeout=120)
        wait_for_line(job, "status:", timeout=120)
    finally:
        job.send_signal(signal.SIGKILL)
        job.communicate(timeout=30)
    done = millpond(conf, password, "run", "--bounded")
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert "authorization" not in done.stderr.lower(), done.stderr[-4000:]

    conf, password = confs["cli"]
    for args in (("status",), ("checkpoint", "show"), ("changelog", "describe")):
        out = millpond(conf, password, *args)
        assert out.returncode == 0, (args, out.stdout + out.stderr[-3000:])

    conf, password = confs["operator"]
    full = millpond(conf, password, "restore", "--full")
    assert full.returncode == 0, full.stdout + full.stderr[-3000:]
    dumped = millpond(conf, password, "store", "dump", "--store", "counts")
    state = {json.loads(line)["key"]: json.loads(line)["value"]
             for line in dumped.stdout.splitlines()}
    assert state_diff(state, expected) == (0, 0)
    created = millpond(conf, password, "topics", "create", "--partitions", str(PARTITIONS))
    assert created.returncode == 0, created.stderr

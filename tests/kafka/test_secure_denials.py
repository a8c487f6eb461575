"""Every authorization failure is fatal and named: a job missing one of the ACLs ``millpond
acls`` prints stops with one line (exit 2) that names the resource and the operation, instead
of retrying forever; once the ACL is granted, the restarted job ends with exact state (nothing
half-written was committed)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SecureKafka
from tests.kafka.secure_util import (
    PASSWORD_VAR,
    change_acl,
    create_input,
    new_user,
    secured_job,
)
from tests.kafka_util import MILLPOND, REPO, state_diff, write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.secure]

PARTITIONS = 2
DENIAL_BOUND_S = 60  # the job must give up within this, not retry forever


@pytest.mark.parametrize("resource, kind, operation", [
    ("transactional-id", "prefix", "Write"),  # init_transactions: every task's fence
    ("group", "job", "Read"),  # joining the job's consumer group
    ("topic", "input", "Read"),  # fetching the input
    ("topic", "changelog", "Write"),  # the first commit's changelog records
    ("topic", "checkpoint", "Create"),  # start-up: creating the checkpoint topic
])
def test_a_missing_acl_stops_the_job_naming_it_and_a_restart_after_the_grant_is_exact(
    resource: str, kind: str, operation: str, secure_kafka: SecureKafka,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    expected = create_input(secure_kafka, source, PARTITIONS, 2000, 30)
    user, password = new_user(secure_kafka, f"u-{name[-8:]}")
    conf = write_properties(tmp_path / "job.properties", secured_job(
        secure_kafka, secure_kafka.user_config(user, password), name, source,
        tmp_path / "state"))
    env = {**os.environ, PASSWORD_VAR: password}
    printed = subprocess.run([MILLPOND, "acls", "--config", str(conf), "--role", "job",
                              "--format", "json"], cwd=REPO, capture_output=True, text=True,
                             timeout=60, env=env)
    acls = json.loads(printed.stdout)["job"]
    names = {"prefix": f"{name}-1-", "job": f"{name}-1", "input": source,
             "changelog": f"{name}-counts-changelog",
             "checkpoint": f"__millpond_checkpoint_{name}_1"}
    [withheld] = [a for a in acls if a["resource"] == resource and a["name"] == names[kind]
                  and a["operation"] == operation]
    for acl in acls:
        if acl is not withheld:
            change_acl(secure_kafka, f"User:{user}", acl)

    # --no-check: the job's own handling of a denial (an ACL revoked while it runs), not
    # the check at start (test_secure_check.py) that would stop it first.
    began = time.monotonic()
    denied = subprocess.run([MILLPOND, "run", "--config", str(conf), "--bounded", "--no-check"],
                            cwd=REPO,
                            capture_output=True, text=True, timeout=DENIAL_BOUND_S + 60,
                            env=env)
    took = time.monotonic() - began
    errors = [line for line in denied.stderr.splitlines() if line.startswith("Error:")]
    assert denied.returncode == 1, denied.stderr[-4000:]  # a denial: a runtime failure
    assert took < DENIAL_BOUND_S, f"gave up only after {took:.0f}s"
    assert len(errors) == 1, denied.stderr[-4000:]
    # Read and Write imply Describe: without them the first call, a Describe, is denied.
    said = {operation, "Describe"} if operation in ("Read", "Write") else {operation}
    assert any(f"denied {op} on {resource} {names[kind]}" in errors[0] for op in said), errors[0]
    assert "Traceback" not in denied.stderr

    change_acl(secure_kafka, f"User:{user}", withheld)
    done = subprocess.run([MILLPOND, "run", "--config", str(conf), "--bounded"], cwd=REPO,
                          capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    dumped = subprocess.run([MILLPOND, "store", "dump", "--config", str(conf), "--store",
                             "counts"], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env=env)
    state = {json.loads(line)["key"]: json.loads(line)["value"]
             for line in dumped.stdout.splitlines()}
    assert state_diff(state, expected) == (0, 0)

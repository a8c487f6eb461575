"""Every authorization failure is fatal and named: a job missing one of the ACLs ``millpond
acls`` prints stops with one line (exit 2) that names the resource and the operation, instead
of retrying forever; once the ACL is granted, the restarted job ends with exact state (nothing
half-written was committed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import SecureKafka
from tests.kafka.test_secure_acls import user_job
from tests.kafka.test_secure_job import PASSWORD_VAR
from tests.kafka_util import MILLPOND, REPO, produce_users, state_diff, write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.secure]

PARTITIONS = 2
DENIAL_BOUND_S = 60  # the job must give up within this, not retry forever


def _kafka_operation(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()


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
    admin = AdminClient(secure_kafka.admin_config)
    admin.create_topics([NewTopic(source, PARTITIONS, 1)])[source].result(timeout=60)
    expected = produce_users(secure_kafka.bootstrap, source, 2000, 30, PARTITIONS,
                             conf=secure_kafka.admin_config)
    user, password = f"u-{name[-8:]}", f"pw-{os.urandom(6).hex()}"
    secure_kafka.add_user(user, password)
    conf = write_properties(tmp_path / "job.properties", user_job(
        secure_kafka, user, password, name, source, tmp_path / "state"))
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
            secure_kafka.grant(f"User:{user}", acl["resource"], acl["name"], acl["pattern"],
                               _kafka_operation(acl["operation"]))

    began = time.monotonic()
    denied = subprocess.run([MILLPOND, "run", "--config", str(conf), "--bounded"], cwd=REPO,
                            capture_output=True, text=True, timeout=DENIAL_BOUND_S + 60,
                            env=env)
    took = time.monotonic() - began
    errors = [line for line in denied.stderr.splitlines() if line.startswith("Error:")]
    assert denied.returncode == 2, denied.stderr[-4000:]
    assert took < DENIAL_BOUND_S, f"gave up only after {took:.0f}s"
    assert len(errors) == 1, denied.stderr[-4000:]
    # Read and Write imply Describe: without them the first call, a Describe, is denied.
    said = {operation, "Describe"} if operation in ("Read", "Write") else {operation}
    assert any(f"denied {op} on {resource} {names[kind]}" in errors[0] for op in said), errors[0]
    assert "Traceback" not in denied.stderr

    secure_kafka.grant(f"User:{user}", withheld["resource"], withheld["name"],
                       withheld["pattern"], _kafka_operation(withheld["operation"]))
    done = subprocess.run([MILLPOND, "run", "--config", str(conf), "--bounded"], cwd=REPO,
                          capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    dumped = subprocess.run([MILLPOND, "store", "dump", "--config", str(conf), "--store",
                             "counts"], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env=env)
    state = {json.loads(line)["key"]: json.loads(line)["value"]
             for line in dumped.stdout.splitlines()}
    assert state_diff(state, expected) == (0, 0)

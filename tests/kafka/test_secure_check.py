"""``millpond check`` names exactly what is missing: with every ACL ``millpond acls`` prints it
passes (before the first run and after), and with any one of them revoked it fails naming
that one and no other; ``millpond run`` runs it first."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import SecureKafka
from tests.kafka.secure_util import change_acl, create_input, new_user, run_as, secured_job
from tests.kafka_util import write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.secure]


def test_check_names_exactly_the_acl_that_is_missing(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    create_input(secure_kafka, source, 2, 200, 10)
    user, password = new_user(secure_kafka, f"c-{name[-8:]}")
    conf = write_properties(tmp_path / "job.properties", secured_job(
        secure_kafka, secure_kafka.user_config(user, password), name, source,
        tmp_path / "state"))

    def millpond(*args: str) -> subprocess.CompletedProcess[str]:
        return run_as(password, *args, "--config", str(conf))

    acls = json.loads(millpond("acls", "--role", "job", "--format", "json").stdout)["job"]
    principal = f"User:{user}"

    def grant(acl: dict[str, str], revoke: bool = False) -> None:
        change_acl(secure_kafka, principal, acl, revoke)

    nothing = millpond("check")
    assert nothing.returncode == 1 and nothing.stdout.count("MISSING") >= len(acls) // 2
    for acl in acls:
        grant(acl)
    before = millpond("check")
    assert before.returncode == 0, before.stdout + before.stderr
    assert "unchecked" in before.stdout  # the changelogs do not exist before the first run
    assert millpond("run", "--bounded").returncode == 0

    after = millpond("check")
    assert after.returncode == 0, after.stdout + after.stderr
    lines = after.stdout.splitlines()
    assert lines[0].startswith("ok") and "connect" in lines[0]
    for acl in acls:
        if acl["pattern"] == "prefixed" and acl["resource"] == "topic":
            continue  # a prefix of topics that do not exist: only Create can be tried
        grant(acl, revoke=True)
        try:
            out = millpond("check")
        finally:
            grant(acl)
        missing = [line for line in out.stdout.splitlines() if line.startswith("MISSING")]
        assert out.returncode == 1, (acl, out.stdout)
        assert len(missing) == 1, (acl, missing)
        assert f"{acl['operation']} on {acl['resource']} {acl['name']}" in missing[0], (
            acl, missing)
        assert "kafka-acls.sh" in missing[0]


@pytest.mark.parametrize("resource, kind, operation", [
    ("group", "job", "Read"),
    ("transactional-id", "prefix", "Write"),
])
def test_run_checks_first_and_stops_naming_the_missing_acl_before_anything_runs(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
    resource: str, kind: str, operation: str,
) -> None:
    """``millpond run`` runs the check at start: one ACL withheld, it exits 2 in seconds
    with that ACL's check line and an error naming it, having made nothing (no checkpoint
    topic, no partition assigned); with the grant the same command runs the job."""
    name, source = topic_name("job"), topic_name("in")
    create_input(secure_kafka, source, 2, 200, 10)
    user, password = new_user(secure_kafka, f"r-{name[-8:]}")
    conf = write_properties(tmp_path / "job.properties", secured_job(
        secure_kafka, secure_kafka.user_config(user, password), name, source,
        tmp_path / "state"))
    acls = json.loads(run_as(password, "acls", "--config", str(conf), "--role", "job",
                             "--format", "json").stdout)["job"]
    names = {"job": f"{name}-1", "prefix": f"{name}-1-"}
    [withheld] = [a for a in acls if (a["resource"], a["name"], a["operation"]) ==
                  (resource, names[kind], operation)]
    for acl in acls:
        if acl is not withheld:
            change_acl(secure_kafka, f"User:{user}", acl)

    began = time.monotonic()
    out = run_as(password, "run", "--config", str(conf), "--bounded", timeout=120)
    took = time.monotonic() - began
    what = f"{operation} on {resource} {names[kind]}"
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    missing = [line for line in out.stderr.splitlines() if line.startswith("MISSING")]
    assert out.returncode == 1 and len(errors) == 1, out.stderr[-4000:]  # as check's 1
    assert took < 15, f"the check took {took:.1f}s"
    assert len(missing) == 1 and what in missing[0], missing
    assert f"kafka-acls.sh --add --allow-principal User:{user} --operation {operation}" in \
        missing[0]
    assert f"lacks 1 ACL(s) the job needs: {what}" in errors[0], errors[0]
    assert "assigned partitions" not in out.stderr and "Traceback" not in out.stderr
    topics = AdminClient(secure_kafka.admin_config).list_topics(timeout=30).topics
    assert f"__millpond_checkpoint_{name}_1" not in topics  # nothing was made

    change_acl(secure_kafka, f"User:{user}", withheld)
    done = run_as(password, "run", "--config", str(conf), "--bounded", timeout=180)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "none missing" in done.stderr

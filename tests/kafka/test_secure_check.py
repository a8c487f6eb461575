"""``millpond check`` names exactly what is missing: with every ACL ``millpond acls`` prints it
passes (before the first run and after), and with any one of them revoked it fails naming
that one and no other."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

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

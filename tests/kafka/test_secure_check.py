"""``millpond check`` names exactly what is missing: with every ACL ``millpond acls`` prints it
passes (before the first run and after), and with any one of them revoked it fails naming
that one and no other."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import SecureKafka
from tests.kafka.test_secure_acls import user_job
from tests.kafka.test_secure_denials import _kafka_operation
from tests.kafka.test_secure_job import PASSWORD_VAR
from tests.kafka_util import MILLPOND, REPO, produce_users, write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.secure]


def test_check_names_exactly_the_acl_that_is_missing(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    admin = AdminClient(secure_kafka.admin_config)
    admin.create_topics([NewTopic(source, 2, 1)])[source].result(timeout=60)
    produce_users(secure_kafka.bootstrap, source, 200, 10, 2, conf=secure_kafka.admin_config)
    user, password = f"c-{name[-8:]}", f"pw-{os.urandom(6).hex()}"
    secure_kafka.add_user(user, password)
    conf = write_properties(tmp_path / "job.properties", user_job(
        secure_kafka, user, password, name, source, tmp_path / "state"))
    env = {**os.environ, PASSWORD_VAR: password}

    def millpond(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([MILLPOND, *args, "--config", str(conf)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=180)

    acls = json.loads(millpond("acls", "--role", "job", "--format", "json").stdout)["job"]
    principal = f"User:{user}"

    def grant(acl: dict[str, str], revoke: bool = False) -> None:
        change = secure_kafka.revoke if revoke else secure_kafka.grant
        change(principal, acl["resource"], acl["name"], acl["pattern"],
               _kafka_operation(acl["operation"]))

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

"""A job and the CLI against a secured broker (SASL_SSL, SCRAM, ACLs on) with nothing but the
job's properties file: ``systems.kafka.security.protocol``, ``sasl.*`` and ``ssl.*`` written
once reach every client millpond makes (the job's consumers, producers and admin client, its
readers, and each CLI command's), and the password comes from the environment, not the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import SecureKafka
from tests.kafka_util import (
    MILLPOND,
    REPO,
    counting_job,
    dump_store,
    produce_users,
    state_diff,
    write_properties,
)

pytestmark = [pytest.mark.kafka, pytest.mark.secure]

PARTITIONS = 2
PASSWORD_VAR = "MILLPOND_TEST_SASL_PASSWORD"


def secured_job(kafka: SecureKafka, name: str, source: str, state: Path) -> dict[str, Any]:
    """The counting job with the admin's connection settings, the password as ``${...}``."""
    props = counting_job(kafka.bootstrap, name, source, state)
    for key, value in kafka.admin_config.items():
        if key != "bootstrap.servers":
            props[f"systems.kafka.{key}"] = f"${{{PASSWORD_VAR}}}" if key == "sasl.password" \
                else value
    return props


def run(*args: str, password: str) -> Any:
    import subprocess

    return subprocess.run([MILLPOND, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=180, env={**os.environ, PASSWORD_VAR: password})


def test_a_job_and_every_cli_command_work_with_only_the_properties_file(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    admin = AdminClient(secure_kafka.admin_config)
    admin.create_topics([NewTopic(source, PARTITIONS, 1)])[source].result(timeout=60)
    expected = produce_users(secure_kafka.bootstrap, source, 3000, 40, PARTITIONS,
                             conf=secure_kafka.admin_config)
    conf = write_properties(tmp_path / "job.properties",
                            secured_job(secure_kafka, name, source, tmp_path / "state"))
    password = secure_kafka.admin_config["sasl.password"]
    assert password not in conf.read_text()

    done = run("run", "--config", str(conf), "--bounded", password=password)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    env_before = os.environ.get(PASSWORD_VAR)
    os.environ[PASSWORD_VAR] = password  # dump_store runs `millpond store dump` (local only)
    try:
        assert state_diff(dump_store(conf, "counts"), expected) == (0, 0)
    finally:
        if env_before is None:
            os.environ.pop(PASSWORD_VAR)
        else:
            os.environ[PASSWORD_VAR] = env_before

    # Each command that reads Kafka, with the same file: restore (admin, readers, producer),
    # status (group describe), checkpoints, changelog offsets.
    for args in (("restore", "--full"), ("status",), ("checkpoint", "show"),
                 ("changelog", "describe"), ("topics", "create", "--partitions", "2")):
        out = run(*args, "--config", str(conf), password=password)
        assert out.returncode == 0, (args, out.stdout + out.stderr[-3000:])
        assert password not in out.stdout + out.stderr
    assert "full" in run("restore", "--full", "--config", str(conf), password=password).stdout

    # Without the password nothing connects, and the error says so in one line.
    denied = run("status", "--config", str(conf), password="wrong")
    assert denied.returncode != 0

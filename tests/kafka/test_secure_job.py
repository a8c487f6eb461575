"""A job and the CLI against a secured broker (SASL_SSL, SCRAM, ACLs on) with nothing but the
job's properties file: ``systems.kafka.security.protocol``, ``sasl.*`` and ``ssl.*`` written
once reach every client millpond makes (the job's consumers, producers and admin client, its
readers, and each CLI command's), and the password comes from the environment, not the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SecureKafka
from tests.kafka.secure_util import create_input, run_as, secured_job
from tests.kafka_util import state_diff, write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.secure]


def test_a_job_and_every_cli_command_work_with_only_the_properties_file(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    name, source = topic_name("job"), topic_name("in")
    expected = create_input(secure_kafka, source, 2, 3000, 40)
    conf = write_properties(tmp_path / "job.properties", secured_job(
        secure_kafka, secure_kafka.admin_config, name, source, tmp_path / "state"))
    password = secure_kafka.admin_config["sasl.password"]
    assert password not in conf.read_text()

    done = run_as(password, "run", "--config", str(conf), "--bounded")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    dumped = run_as(password, "store", "dump", "--config", str(conf), "--store", "counts")
    state = {json.loads(line)["key"]: json.loads(line)["value"]
             for line in dumped.stdout.splitlines()}
    assert state_diff(state, expected) == (0, 0)

    # Each command that reads Kafka, with the same file: restore (admin, readers, producer),
    # status (group describe), checkpoints, changelog offsets, topics.
    for args in (("restore", "--full"), ("status",), ("checkpoint", "show"),
                 ("changelog", "describe"), ("topics", "create", "--partitions", "2")):
        out = run_as(password, *args, "--config", str(conf))
        assert out.returncode == 0, (args, out.stdout + out.stderr[-3000:])
        assert password not in out.stdout + out.stderr
        if args[0] == "restore":
            assert "full" in out.stdout

    # A wrong password: one line saying authentication failed, well before any 30 s timeout.
    denied = run_as("wrong", "status", "--config", str(conf))
    errors = [line for line in denied.stderr.splitlines() if line.startswith("Error:")]
    assert denied.returncode == 2 and len(errors) == 1, denied.stderr[-3000:]
    assert "authentication failed" in errors[0], errors[0]

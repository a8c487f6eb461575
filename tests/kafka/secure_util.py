"""Helpers of the security suite: a counting job that connects as a principal of the secured
broker (its password from the environment), its input, and ACL changes from the JSON that
``millpond acls --format json`` prints."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import SecureKafka
from tests.kafka_util import MILLPOND, REPO, counting_job, produce_users

PASSWORD_VAR = "MILLPOND_TEST_SASL_PASSWORD"


def secured_job(kafka: SecureKafka, client: dict[str, str], name: str, source: str,
                state: Path) -> dict[str, Any]:
    """The counting job connecting with ``client``'s settings, the password as ``${...}``
    (restarts rejoin as new members: no static membership)."""
    props = counting_job(kafka.bootstrap, name, source, state)
    props.pop("systems.kafka.consumer.group.instance.id")
    for key, value in client.items():
        if key != "bootstrap.servers":
            props[f"systems.kafka.{key}"] = f"${{{PASSWORD_VAR}}}" if key == "sasl.password" \
                else value
    return props


def create_input(kafka: SecureKafka, topic: str, partitions: int, messages: int,
                 users: int) -> Counter[str]:
    """Create ``topic`` and produce page views to it as the admin; the expected counts."""
    admin = AdminClient(kafka.admin_config)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)
    return produce_users(kafka.bootstrap, topic, messages, users, partitions,
                         conf=kafka.admin_config)


def new_user(kafka: SecureKafka, name: str) -> tuple[str, str]:
    """A new SCRAM user (no ACLs) and its password."""
    user, password = name, f"pw-{os.urandom(6).hex()}"
    kafka.add_user(user, password)
    return user, password


def run_as(password: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``millpond ARGS`` with the principal's password in the environment."""
    return subprocess.run([MILLPOND, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, PASSWORD_VAR: password})


def change_acl(kafka: SecureKafka, principal: str, acl: dict[str, str],
               revoke: bool = False) -> None:
    """Grant (or revoke) one ACL as ``millpond acls --format json`` prints it."""
    operation = re.sub(r"(?<!^)(?=[A-Z])", "_", acl["operation"]).upper()
    change = kafka.revoke if revoke else kafka.grant
    change(principal, acl["resource"], acl["name"], acl["pattern"], operation)

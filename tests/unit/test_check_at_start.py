"""The check ``millpond run`` runs at start (the broker-side proof is
tests/kafka/test_secure_check.py): a broker that does not answer is
:class:`BrokerUnreachableError` (what a caller waiting for Kafka catches), never a finding or
another error."""

from __future__ import annotations

import socket

import pytest

from millpond.config import Config
from millpond.config.properties import parse_properties
from millpond.job import Job
from millpond.kafka.errors import BrokerUnreachableError
from millpond.ops.check import check, preflight


def _job(bootstrap: str) -> Job:
    return Job(Config.from_properties(parse_properties(
        "job.name=counts\ntask.class=tests.jobs.counting.Counter\ntask.inputs=kafka.in\n"
        f"systems.kafka.bootstrap.servers={bootstrap}\n", "job.properties")))


def test_an_unreachable_broker_raises_broker_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("millpond.kafka.admin.TIMEOUT", 1.5)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{unused.getsockname()[1]}"
    with pytest.raises(BrokerUnreachableError, match=f"no Kafka broker at {closed}"):
        preflight(_job(closed))
    with pytest.raises(BrokerUnreachableError):
        check(_job(closed), "cli")

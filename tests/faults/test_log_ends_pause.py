"""After a broker pause long enough for its controller to fence it (its leaders' epochs move
on), librdkafka's admin client kept asking ListOffsets with the old leader epoch and got
FENCED_LEADER_EPOCH every time: a job's commits could not read their changelogs' ends and
replayed until the task timed out (seen in the stop60s outage case). LogEnds refreshes the
client's metadata (a new client if that is not enough) and answers."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from millpond.kafka import clients
from millpond.kafka.ends import LogEnds
from millpond.kafka.errors import TransactionAbortedError

pytestmark = pytest.mark.kafka
PAUSE_S = 15  # past KRaft's 9 s broker session: the controller fences the broker


def test_ends_are_read_after_the_broker_was_paused_and_fenced(own_broker: Any) -> None:
    broker = own_broker
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("log", 2, 1)])["log"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce("log", b"v", partition=i % 2)
    assert producer.flush(30) == 0
    parts = [("log", 0), ("log", 1)]
    ends = LogEnds(AdminClient({"bootstrap.servers": bootstrap}),
                   remake=lambda: clients.admin({"bootstrap.servers": bootstrap}))
    unrefreshed = LogEnds(AdminClient({"bootstrap.servers": bootstrap}), timeout_s=5)
    assert ends(parts) == unrefreshed(parts) == {("log", 0): 5, ("log", 1): 5}

    # the fault: once the controller has fenced the resumed broker, a client that keeps its
    # metadata is refused. Whether a pause ends in a fence is a race between the resumed
    # broker's heartbeat and the controller's session check: up to 3 pauses until one does.
    setattr(unrefreshed, "_refresh", lambda *args, **kwargs: None)  # noqa: B010
    pid = broker.status().pid
    refused = None
    for _ in range(3):
        os.kill(pid, signal.SIGSTOP)
        time.sleep(PAUSE_S)
        os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        while refused is None and time.monotonic() < deadline:
            try:
                unrefreshed(parts)
                time.sleep(0.5)
            except TransactionAbortedError as exc:
                refused = str(exc)
        if refused is not None:
            break
    assert refused is not None and "Leader epoch is older" in refused, refused
    assert ends(parts) == {("log", 0): 5, ("log", 1): 5}
    assert ends.refreshes >= 1

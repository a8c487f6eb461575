"""millpond's Kafka clients log through Python logging, never as raw librdkafka lines."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.kafka_util import REPO


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_librdkafka_lines_go_to_the_millpond_kafka_logger() -> None:
    """A consumer and a producer that cannot connect: librdkafka's connection errors arrive as
    Python log records of ``millpond.kafka`` (in the process's format), and nothing reaches
    stderr in librdkafka's own ``%3|<time>|FAIL|...`` form. Run in a subprocess so stderr is
    the real file descriptor librdkafka would write to."""
    script = textwrap.dedent(f"""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                            format="LOG %(name)s %(levelname)s %(message)s")
        from millpond.kafka import clients
        conf = {{"bootstrap.servers": "127.0.0.1:{_closed_port()}",
                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 100}}
        consumer = clients.consumer({{**conf, "group.id": "g"}})
        consumer.subscribe(["t"])
        for _ in range(6):
            consumer.poll(0.2)
        consumer.close()
        # Another address: the same failure from the same address is one cause, logged
        # once per 30 s whichever client reports it (millpond.kafka.outage.LogLimiter).
        producer = clients.producer({{**conf, "bootstrap.servers": "localhost:{_closed_port()}"}})
        producer.produce("t", b"x")
        producer.poll(1.0)
        producer.purge()
        producer.flush(1)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    records = [line for line in out.stdout.splitlines() if line.startswith("LOG millpond.kafka ")]
    assert any("rdkafka#consumer" in r and "Connect to" in r for r in records), out.stdout
    assert any("rdkafka#producer" in r for r in records), out.stdout
    raw = [line for line in out.stderr.splitlines() if line.startswith("%")]
    assert raw == [], out.stderr


def test_each_librdkafka_line_names_its_client_and_a_loading_coordinator_is_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """confluent-kafka calls the logger with ``("%s [%s] %s", facility, client, text)``: the
    record names the client first, without librdkafka's thread tag; a coordinator that is
    still loading (a fresh broker, retried by librdkafka) is INFO, other warnings stay."""
    from millpond.kafka.clients import LibrdkafkaLog
    from millpond.kafka.outage import LogLimiter

    LIBRDKAFKA_LOG = LibrdkafkaLog(limiter=LogLimiter())  # not the process-wide limiter's history
    caplog.set_level(logging.DEBUG, logger="millpond.kafka")
    LIBRDKAFKA_LOG.log(logging.WARNING, "%s [%s] %s", "GETPID", "rdkafka#producer-3",
                       "[thrd:main]: Failed to acquire idempotence PID from broker "
                       "127.0.0.1:9092/1: Broker: Coordinator load in progress: retrying")
    LIBRDKAFKA_LOG.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
                       "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to "
                       "ipv4#127.0.0.1:1 failed: Connection refused")
    LIBRDKAFKA_LOG.log(logging.WARNING, "%s [%s] %s", "SESSTMOUT", "job-1#consumer-2",
                       "[thrd:main]: Consumer group session timed out")
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("millpond.kafka", logging.INFO, "rdkafka#producer-3 GETPID: Failed to acquire "
         "idempotence PID from broker 127.0.0.1:9092/1: Broker: Coordinator load in progress: "
         "retrying"),
        ("millpond.kafka", logging.ERROR, "rdkafka#consumer-1 FAIL: 127.0.0.1:1/bootstrap: "
         "Connect to ipv4#127.0.0.1:1 failed: Connection refused"),
        ("millpond.kafka", logging.WARNING, "job-1#consumer-2 SESSTMOUT: Consumer group "
         "session timed out"),
    ]


class _StuckClose:
    """A client whose close waits until released (librdkafka's close waiting on a group
    coordinator that never answers; seen once in CI after a SIGSTOPped broker, not
    reproducible on demand: a frozen coordinator alone lets close return at once)."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.closed = False

    def close(self) -> None:
        self.release.wait(30)
        self.closed = True


def test_a_close_that_waits_for_ever_is_left_behind_after_its_bound(
        caplog: pytest.LogCaptureFixture) -> None:
    import time

    from millpond.kafka.clients import close_within

    client = _StuckClose()
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="millpond.kafka"):
        assert close_within(client, "group consumer", timeout_s=0.5) is False  # type: ignore[arg-type]
    assert 0.45 <= time.monotonic() - began < 2.0
    assert "the group consumer did not close within 0.5s" in caplog.text
    client.release.set()  # the close left behind still ends when it can
    deadline = time.monotonic() + 5
    while not client.closed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.closed


def test_a_prompt_close_returns_true_and_a_failed_one_is_not_raised() -> None:
    from millpond.kafka.clients import close_within

    client = _StuckClose()
    client.release.set()
    assert close_within(client, "group consumer", timeout_s=5) is True  # type: ignore[arg-type]
    assert client.closed

    class Failed:
        def close(self) -> None:
            raise RuntimeError("Consumer closed")

    assert close_within(Failed(), "failed group consumer", timeout_s=5) is True  # type: ignore[arg-type]

"""millpond's Kafka clients log through Python logging, never as raw librdkafka lines."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

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
        producer = clients.producer(conf)
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

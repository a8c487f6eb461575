"""Shared fixtures: a real Kafka broker for the session, and per-test topic names.

The broker is chosen in this order: ``MILLPOND_TEST_BOOTSTRAP`` (an existing broker),
a testcontainers Kafka when a Docker engine answers, else a private local broker run
from Maven Central jars (``millpond.dev.kafka``). With ``CI=true`` a missing broker
fails the tests that need it; elsewhere they skip with the reason.

``secure_kafka`` is a second, secured broker (SASL_SSL, SCRAM users, ACLs enforced), always a
private local one (``millpond.dev.secure_kafka``), started on first use.

``s3`` is a real S3 server for state backups (S3Proxy on loopback, reached through ``s3://``
and s3fs), also started on first use and shared by every directory's tests.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BROKER_FIXTURES = ("kafka_broker", "secure_kafka", "own_broker")

# CI=true (GitHub Actions, .ci/run), CI=1 and CI=yes all count as CI.
IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--faults-full", action="store_true", default=False,
                     help="run the long versions of tests/faults (make faults)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test that uses the broker without the ``kafka`` mark, so
    ``-m "not kafka"`` (make test-fast) really runs without Kafka."""
    unmarked = [item.nodeid for item in items
                if set(BROKER_FIXTURES) & set(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("kafka") is None]
    if unmarked:
        raise pytest.UsageError("tests that use the broker need @pytest.mark.kafka: "
                                + ", ".join(unmarked))


def unavailable(reason: str) -> None:
    """Fail in CI, skip elsewhere: a missing broker or JVM is never silently skipped in CI."""
    if IN_CI:
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def installed(program: str, how: str) -> str:
    """The path of ``program`` (on PATH or in /usr/bin), else :func:`unavailable` saying
    ``how`` to install it."""
    found = shutil.which(program) or (
        f"/usr/bin/{program}" if Path(f"/usr/bin/{program}").exists() else None)
    if found is None:
        unavailable(f"{program} is not installed ({how})")
    assert found is not None
    return found


@dataclass
class Broker:
    """The session's broker: its address, and the local broker handle when we run it."""

    bootstrap: str
    local: object | None = None  # millpond.dev.kafka.LocalKafka when started here


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A running Kafka 4.x broker for the whole session."""
    env = os.environ.get("MILLPOND_TEST_BOOTSTRAP")
    if env:
        yield Broker(env)
        return
    if _docker_answers():
        from testcontainers.community.kafka import KafkaContainer

        container = (
            KafkaContainer("confluentinc/cp-kafka:8.0.0")
            .with_kraft()
            .with_env("KAFKA_LOG_CLEANER_BACKOFF_MS", "500")
            .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
        )
        with container:
            yield Broker(container.get_bootstrap_server())
        return
    from millpond.dev.errors import DevError
    from millpond.dev.kafka import LocalKafka, free_port

    data_dir: Path = tmp_path_factory.mktemp("kafka")
    port = free_port()
    broker = LocalKafka(data_dir=data_dir, port=port, controller_port=free_port())
    try:
        broker.start(timeout=120)
    except DevError as exc:
        unavailable(f"no Kafka broker could be started: {exc}")
    try:
        yield Broker(broker.bootstrap, broker)
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: Broker) -> str:
    """``bootstrap.servers`` of the session's real broker."""
    return kafka_broker.bootstrap


@dataclass
class SecureKafka:
    """The session's secured broker: where it is, the admin's client settings, and its
    users and ACLs (changes return once the broker enforces them)."""

    bootstrap: str
    ca: Path
    admin_config: dict[str, str]
    local: Any  # millpond.dev.secure_kafka.SecureLocalKafka
    security: Any  # millpond.dev.kafka_security.SecurityAdmin

    def user_config(self, name: str, password: str,
                    mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """librdkafka settings for user ``name`` (SASL_SSL with the dev CA)."""
        return dict(self.local.user_config(name, password, mechanism))

    def add_user(self, name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        self.security.add_user(name, password, mechanism)

    def grant(self, principal: str, resource_type: str, name: str, pattern_type: str,
              operation: str) -> None:
        self.security.grant(principal, resource_type, name, pattern_type, operation)

    def revoke(self, principal: str, resource_type: str, name: str, pattern_type: str,
               operation: str) -> None:
        self.security.revoke(principal, resource_type, name, pattern_type, operation)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """A private secured Kafka broker (SASL_SSL, SCRAM, ACLs) for the whole session."""
    from millpond.dev.errors import DevError
    from millpond.dev.kafka import free_port
    from millpond.dev.kafka_security import SecurityAdmin
    from millpond.dev.secure_kafka import SecureLocalKafka

    broker = SecureLocalKafka(data_dir=tmp_path_factory.mktemp("secure-kafka"),
                              port=free_port(), controller_port=free_port())
    try:
        broker.start(timeout=120)
    except DevError as exc:
        broker.stop()
        unavailable(f"no secured Kafka broker could be started: {exc}")
    try:
        conf = broker.client_config()
        yield SecureKafka(broker.bootstrap, broker.ca_file, conf, broker,
                          SecurityAdmin({**conf, "log_level": 3}))
    finally:
        broker.stop()


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Make topic names unique to this test, so tests never share a topic."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:80]
    salt = uuid.uuid4().hex[:8]

    def make(suffix: str = "t") -> str:
        return f"{base}-{suffix}-{salt}"

    return make


@dataclass
class S3:
    """The session's S3 server: its handle, fsspec options and one bucket for the tests."""

    server: Any
    options: dict[str, Any]
    bucket: str

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def properties(self, prefix: str) -> dict[str, str]:
        """``job.state.backup.*`` properties reaching this server."""
        opts = self.options
        return {"job.state.backup.uri": self.uri(prefix),
                "job.state.backup.options.key": opts["key"],
                "job.state.backup.options.secret": opts["secret"],
                "job.state.backup.options.client_kwargs.endpoint_url":
                    opts["client_kwargs"]["endpoint_url"],
                "job.state.backup.options.client_kwargs.region_name": "us-east-1"}


@contextmanager
def running_s3(data_dir: Path, bucket: str) -> Iterator[S3]:
    """A real S3Proxy on a free loopback port with ``bucket`` created, stopped on exit
    (fails in CI when it cannot start)."""
    import s3fs

    from millpond.dev.errors import DevError
    from millpond.dev.kafka import free_port
    from millpond.dev.s3 import LocalS3

    server = LocalS3(data_dir, port=free_port())
    try:
        server.start(timeout=90)
    except DevError as exc:
        unavailable(f"S3Proxy did not start: {exc}")
    try:
        fs = s3fs.S3FileSystem(**server.storage_options(), skip_instance_cache=True)
        fs.call_s3("create_bucket", Bucket=bucket)
        yield S3(server, server.storage_options(), bucket)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """A real S3Proxy for the session."""
    with running_s3(tmp_path_factory.mktemp("s3"), "millpond-backups") as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_process_memory() -> Iterator[None]:
    """A job's memory plan sets process-wide state (the shared RocksDB cache and write-buffer
    manager, the object caches' budget, the restore batch bound): each test starts without
    the one an earlier test's job left, as a new process would."""
    from millpond.kafka import reading
    from millpond.stores import cached
    from millpond.stores.engines import rocksdb_options

    yield
    rocksdb_options._process_memory = None
    cached._process_budget = None
    reading._batch_bytes = reading.BATCH_BYTES


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Any]:
    """A broker of the test's own (``millpond.dev.kafka.LocalKafka``), on free ports, its data
    dir kept across its restarts: a test may kill, pause or restart it without disturbing
    any other test. Resumed if left paused, stopped at the end."""
    from millpond.dev.errors import DevError
    from millpond.dev.kafka import LocalKafka, free_port

    local = LocalKafka(data_dir=tmp_path / "kafka", port=free_port(), controller_port=free_port())
    try:
        local.start(timeout=120)
    except DevError as exc:
        unavailable(f"no Kafka broker could be started: {exc}")
    try:
        yield local
    finally:
        pid = local.status().pid
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        local.stop()

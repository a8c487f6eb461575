"""The installed ``millpond`` console script answers --help and reports the dev broker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Broker, unavailable

MILLPOND = str(Path(sys.executable).with_name("millpond"))


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MILLPOND, *args], capture_output=True, text=True, timeout=timeout)


def test_help_lists_commands() -> None:
    out = run("--help")
    assert out.returncode == 0, out.stderr
    assert "dev" in out.stdout
    sub = run("dev", "kafka", "--help")
    assert sub.returncode == 0
    for command in ("start", "stop", "status"):
        assert command in sub.stdout


@pytest.mark.kafka
def test_status_reports_running_local_broker(kafka_broker: Broker) -> None:
    """`status` on the session's dev broker: running, its pid alive, its address and data
    dir. A broker the tests did not start (MILLPOND_TEST_BOOTSTRAP, a container) has no dev
    data dir to report on: the test says so as a skip instead of passing without checking
    (test_dev_kafka_start_status_stop_on_its_own_port_and_data_dir checks a running
    broker's status on its own broker either way)."""
    from millpond.dev.kafka import LocalKafka
    from millpond.dev.procs import alive as _pid_alive

    local = kafka_broker.local
    if not isinstance(local, LocalKafka):
        pytest.skip(f"the session broker {kafka_broker.bootstrap} is not a dev broker these "
                    "tests started (MILLPOND_TEST_BOOTSTRAP or a container): no status to read")
    out = run("dev", "kafka", "--data-dir", str(local.data_dir), "status")
    assert out.returncode == 0, out.stdout + out.stderr
    match = re.fullmatch(r"running pid=(\d+) bootstrap=(\S+) data=(\S+) gc=g1\n", out.stdout)
    assert match, out.stdout  # the tests' brokers run Kafka's default collector
    assert (match.group(2), match.group(3)) == (local.bootstrap, str(local.data_dir.resolve()))
    assert _pid_alive(int(match.group(1)))


def test_status_reports_a_stopped_dev_broker(tmp_path: Path) -> None:
    """`status` where no broker runs: exit 1, "not running" and the address it would use."""
    idle = run("dev", "kafka", "--data-dir", str(tmp_path / "none"), "--port", "19092", "status")
    assert idle.returncode == 1, idle.stdout + idle.stderr
    assert idle.stdout.startswith("not running (bootstrap would be 127.0.0.1:19092"), idle.stdout


def _java_and_jars_or_unavailable() -> None:
    """The dev broker needs Java 17+ and its jars (cached, or Maven to fetch them)."""
    import shutil

    from millpond.dev.errors import DevError
    from millpond.dev.kafka import KAFKA_VERSION, cache_root, require_java17

    try:
        require_java17()
    except DevError as exc:
        unavailable(f"no JVM for the dev broker: {exc}")
    cached = (cache_root() / f"kafka-{KAFKA_VERSION}" / "libs" / ".complete").exists()
    if not cached and shutil.which("mvn") is None:
        unavailable("the Kafka jars are not cached and Maven is not installed")


def _free_port_pair() -> int:
    """A free port P with P+1 free too (`dev kafka --port P` puts its controller on P+1)."""
    from millpond.dev.kafka import _port_free, free_port

    for _ in range(50):
        port = free_port()
        if port < 65535 and _port_free(port + 1):
            return port
    raise AssertionError("no two consecutive free ports")


@pytest.mark.kafka
def test_dev_kafka_start_status_stop_on_its_own_port_and_data_dir(tmp_path: Path) -> None:
    """The whole life of a dev broker away from 127.0.0.1:9092: start prints its address and
    the broker serves clients, a second start reuses it, status reports it (ports remembered
    in the data dir) with the collector it was started with (``--gc zgc``, as `make bench`
    starts it; read from the JVM's command line), stop ends its process, and status/stop
    then say it is not running."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from millpond.dev.kafka import LocalKafka
    from millpond.dev.procs import alive as _pid_alive
    from tests.kafka_util import create_topic

    _java_and_jars_or_unavailable()
    port, data = _free_port_pair(), tmp_path / "kafka"
    bootstrap = f"127.0.0.1:{port}"
    cli = ["dev", "kafka", "--data-dir", str(data), "--port", str(port)]
    try:
        started = run(*cli[:2], "--gc", "zgc", *cli[2:], "start", "--timeout", "120",
                      timeout=180)
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.strip() == bootstrap
        status = run("dev", "kafka", "--data-dir", str(data), "status")  # port from the data dir
        assert status.returncode == 0, status.stdout + status.stderr
        match = re.fullmatch(r"running pid=(\d+) bootstrap=(\S+) data=(\S+) gc=zgc\n",
                             status.stdout)
        assert match, status.stdout
        pid = int(match.group(1))
        assert (match.group(2), match.group(3)) == (bootstrap, str(data.resolve()))
        assert _pid_alive(pid)

        create_topic(bootstrap, "dev-check", 1)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("dev-check", key=b"k", value=b"hello")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dev-check"})
        try:
            consumer.assign([TopicPartition("dev-check", 0, 0)])
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None and msg.value() == b"hello"
        finally:
            consumer.close()

        again = run(*cli, "start", timeout=120)
        assert again.returncode == 0 and again.stdout.strip() == bootstrap
        assert f"running pid={pid} " in run(*cli, "status").stdout  # the same broker

        stopped = run(*cli, "stop")
        assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped"
        assert not _pid_alive(pid)
        after = run(*cli, "status")
        assert after.returncode == 1
        assert after.stdout.startswith(f"not running (bootstrap would be {bootstrap}")
        assert run(*cli, "stop").stdout.strip() == "not running"
    finally:
        LocalKafka(data_dir=data, port=port).stop()


@pytest.mark.kafka
def test_dev_kafka_start_refuses_a_port_in_use(tmp_path: Path) -> None:
    """A port someone else listens on (as the benchmark broker does on 9092) is refused with a
    way out, and the listener is left alone."""
    import socket

    _java_and_jars_or_unavailable()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = run("dev", "kafka", "--data-dir", str(tmp_path / "k"), "--port", str(port),
                      "start")
        assert refused.returncode == 2
        assert f"port 127.0.0.1:{port} is already in use" in refused.stderr, refused.stderr
        assert "--port N" in refused.stderr
        assert not (tmp_path / "k" / "broker.json").exists()
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # still listening


def test_kafka_cluster_ids_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-storage format -t takes an id starting with "-" for an option (a CI run's broker
    never formatted): such ids are drawn again, as Kafka's own Uuid.randomUuid() does."""
    import base64
    import uuid

    from millpond.dev import kafka

    dash = uuid.UUID(bytes=base64.urlsafe_b64decode("-" + "A" * 21 + "=="))
    draws = iter([dash, dash, uuid.UUID(int=7)])
    monkeypatch.setattr(kafka.uuid, "uuid4", lambda: next(draws))
    assert kafka._kafka_uuid() == base64.urlsafe_b64encode(uuid.UUID(int=7).bytes).decode().rstrip("=")
    monkeypatch.undo()
    assert all(not kafka._kafka_uuid().startswith("-") for _ in range(2000))


@pytest.mark.kafka
def test_dev_kafka_secure_start_status_stop(tmp_path: Path) -> None:
    """`start --secure` prints the client settings (no password), the admin's settings file
    is 0600 and logs the admin in, no secret is on the broker's command line, and
    status/stop --secure find it by its data dir."""
    from confluent_kafka.admin import AdminClient

    from millpond.dev.procs import alive as _pid_alive
    from millpond.dev.secure_kafka import SecureLocalKafka

    _java_and_jars_or_unavailable()
    port, data = _free_port_pair(), tmp_path / "secure"
    bootstrap = f"127.0.0.1:{port}"
    cli = ["dev", "kafka", "--data-dir", str(data), "--port", str(port)]
    try:
        started = run(*cli, "start", "--secure", "--timeout", "120", timeout=180)
        assert started.returncode == 0, started.stdout + started.stderr
        admin_file, ca = data.resolve() / "admin.properties", data.resolve() / "tls" / "ca.pem"
        lines = started.stdout.splitlines()
        assert f"systems.kafka.bootstrap.servers={bootstrap}" in lines
        assert "systems.kafka.security.protocol=SASL_SSL" in lines
        assert f"systems.kafka.ssl.ca.location={ca}" in lines
        assert any(str(admin_file) in line and "0600" in line for line in lines), lines

        conf = dict(line.split("=", 1) for line in admin_file.read_text().splitlines())
        password = conf["sasl.password"]
        assert password not in started.stdout + started.stderr
        for private in (admin_file, data / "server.properties", data / "secrets.json",
                        data / "tls" / "broker.pem"):
            assert private.stat().st_mode & 0o777 == 0o600, private
        assert AdminClient(conf).list_topics(timeout=30).brokers

        status = run(*cli, "status", "--secure")
        assert status.returncode == 0, status.stdout + status.stderr
        match = re.match(r"running pid=(\d+) bootstrap=(\S+) ", status.stdout)
        assert match and match.group(2) == bootstrap, status.stdout
        pid = int(match.group(1))
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        assert password not in cmdline and "password" not in cmdline

        assert run(*cli, "stop", "--secure").stdout.strip() == "stopped"
        assert not _pid_alive(pid)
        assert run(*cli, "status", "--secure").returncode == 1
    finally:
        SecureLocalKafka(data_dir=data, port=port).stop()

"""A connection that no retry can mend ends a command at once with one line saying why: a
CA that did not sign the broker's certificate, a plaintext client on the TLS port, a TLS
client on a plaintext port (a wrong password: test_secure_job.py). Each for ``millpond run``
and a read-only command, well within 30 s; the causes are read from librdkafka's texts
(tests/unit/test_connection_failures.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from millpond.dev.tls import DevCertificates
from millpond.kafka import probe
from tests.conftest import Broker, SecureKafka
from tests.kafka.secure_util import run_as, secured_job
from tests.kafka_util import write_properties

pytestmark = [pytest.mark.kafka, pytest.mark.secure]

WITHIN_S = 30.0


def _one_error_line(args: tuple[str, ...], conf: Path, password: str) -> tuple[str, float]:
    started = time.monotonic()
    out = run_as(password, *args, "--config", str(conf), timeout=120)
    took = time.monotonic() - started
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error:")]
    assert out.returncode == 2 and len(errors) == 1, (args, out.stdout, out.stderr[-3000:])
    assert "Traceback" not in out.stderr and "Broker transport failure" not in out.stderr, (
        out.stderr[-3000:])
    assert took < WITHIN_S, (args, took)
    return errors[0], took


@pytest.mark.parametrize("command", [("run",), ("status",)])
def test_a_ca_that_did_not_sign_the_broker_certificate_is_named(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
    command: tuple[str, ...],
) -> None:
    other = DevCertificates(tmp_path / "other-ca").ensure()
    client = {**secure_kafka.admin_config, "ssl.ca.location": str(other.ca)}
    conf = write_properties(tmp_path / "job.properties", secured_job(
        secure_kafka, client, topic_name("job"), topic_name("in"), tmp_path / "state"))
    line, _ = _one_error_line(command, conf, secure_kafka.admin_config["sasl.password"])
    assert line.startswith(f"Error: TLS certificate verification failed for the Kafka "
                           f"brokers at {secure_kafka.bootstrap}"), line
    assert f"systems.kafka.ssl.ca.location ({other.ca})" in line, line


@pytest.mark.parametrize("protocol", ["", "PLAINTEXT", "SASL_PLAINTEXT"])
@pytest.mark.parametrize("command", [("run",), ("status",)])
def test_a_plaintext_client_on_the_tls_port_is_a_protocol_mismatch(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
    command: tuple[str, ...], protocol: str,
) -> None:
    client = {"bootstrap.servers": secure_kafka.bootstrap}
    if protocol:  # "": security.protocol not set at all
        client["security.protocol"] = protocol
    if protocol == "SASL_PLAINTEXT":
        client.update({k: v for k, v in secure_kafka.admin_config.items() if "sasl" in k})
    conf = write_properties(tmp_path / "job.properties", secured_job(
        secure_kafka, client, topic_name("job"), topic_name("in"), tmp_path / "state"))
    line, _ = _one_error_line(command, conf, secure_kafka.admin_config["sasl.password"])
    assert line.startswith(f"Error: protocol mismatch: the broker at {secure_kafka.bootstrap} "
                           "speaks TLS"), line
    assert f"security.protocol={protocol or 'PLAINTEXT'}" in line, line
    assert "set systems.kafka.security.protocol=SASL_SSL" in line, line


@pytest.mark.parametrize("command", [("run",), ("status",)])
def test_a_tls_client_on_a_plaintext_port_is_a_protocol_mismatch(
    secure_kafka: SecureKafka, kafka_broker: Broker, topic_name: Callable[[str], str],
    tmp_path: Path, command: tuple[str, ...],
) -> None:
    client = {**secure_kafka.admin_config, "bootstrap.servers": kafka_broker.bootstrap}
    props = secured_job(secure_kafka, client, topic_name("job"), topic_name("in"),
                        tmp_path / "state")
    props["systems.kafka.bootstrap.servers"] = kafka_broker.bootstrap
    conf = write_properties(tmp_path / "job.properties", props)
    line, _ = _one_error_line(command, conf, secure_kafka.admin_config["sasl.password"])
    assert line.startswith(f"Error: protocol mismatch: the broker at {kafka_broker.bootstrap} "
                           "speaks plaintext"), line
    assert "security.protocol=SASL_SSL" in line, line


def test_the_probes_know_each_listener(secure_kafka: SecureKafka, kafka_broker: Broker) -> None:
    """What confirms a suspected mismatch: the TLS port answers a TLS handshake and no
    plaintext ApiVersions, the plaintext port the other way round."""
    assert probe.speaks_tls(secure_kafka.bootstrap) is True
    assert probe.speaks_plaintext_kafka(secure_kafka.bootstrap) is None
    plain = kafka_broker.bootstrap.split(",")[0]
    assert probe.speaks_plaintext_kafka(plain) is True
    assert probe.speaks_tls(plain) is None

"""A failed connection's cause, read from librdkafka's own words: the strings below were
captured from confluent-kafka 2.16 (librdkafka 2.16.0) against the secured dev broker and the
plaintext one (``error_cb`` texts and ``FAIL`` log lines, thread tag removed as
:class:`~millpond.kafka.clients.LibrdkafkaLog` does), and, where noted, from older
librdkafka versions' lines as users reported them. The broker-side proof is
tests/kafka/test_secure_connect.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError

from millpond.kafka import probe
from millpond.kafka.clients import LibrdkafkaLog
from millpond.kafka.connection import (
    AUTHENTICATION,
    CERTIFICATE,
    PLAINTEXT_TO_TLS,
    TLS,
    TLS_TO_PLAINTEXT,
    classify,
    describe,
)
from millpond.kafka.errors import (
    AuthenticationError,
    ProtocolMismatchError,
    TlsCertificateError,
)
from millpond.kafka.faults import ClientFaults

WRONG_PASSWORD = (
    "sasl_ssl://127.0.0.1:59003/bootstrap: SASL authentication error: Authentication failed "
    "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
    "(after 313ms in state AUTH_REQ)")
WRONG_CA = (
    "sasl_ssl://127.0.0.1:59003/bootstrap: SSL handshake failed: error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified, verify that "
    "ssl.ca.location is correctly configured or root CA certificates are installed (install "
    "ca-certificates package) (after 8ms in state SSL_HANDSHAKE)")
# A plaintext client on the TLS port: only a log line (INFO), error_cb says "brokers down".
PLAINTEXT_ON_TLS = (
    "127.0.0.1:59003/bootstrap: Disconnected: connection closed by peer: receive 0 after "
    "POLLIN (after 0ms in state APIVERSION_QUERY)")
SASL_PLAINTEXT_ON_TLS = (
    "sasl_plaintext://127.0.0.1:59003/bootstrap: Disconnected: connection closed by peer: "
    "receive 0 after POLLIN (after 1ms in state APIVERSION_QUERY)")
# The same, from librdkafka 1.x (as kcat users reported it).
PLAINTEXT_ON_TLS_HINTED = (
    "192.168.205.13:8080/bootstrap: Disconnected while requesting ApiVersion: might be caused "
    "by incorrect security.protocol configuration (connecting to a SSL listener?) or broker "
    "version is < 0.10 (see api.version.request) (after 5ms in state APIVERSION_QUERY)")
# A SASL_SSL client on the plaintext port: error_cb (_TRANSPORT) and log lines, two forms.
TLS_ON_PLAINTEXT = (
    "sasl_ssl://127.0.0.1:38985/bootstrap: SSL handshake failed: Disconnected: SSL connection "
    "closed by peer: connecting to a PLAINTEXT broker listener? (after 1ms in state "
    "SSL_HANDSHAKE)")
TLS_ON_PLAINTEXT_BARE = (
    "sasl_ssl://127.0.0.1:38985/bootstrap: Disconnected: SSL connection closed by peer "
    "(after 2ms in state SSL_HANDSHAKE)")
# What must not be read as any of these: a broker that is down, a long-idle connection
# closed, a broker that went away while a TLS client was connected.
REFUSED = ("sasl_ssl://127.0.0.1:59003/bootstrap: Connect to ipv4#127.0.0.1:59003 failed: "
           "Connection refused (after 0ms in state CONNECT)")
PLAIN_REFUSED = ("127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: Connection "
                 "refused (after 0ms in state CONNECT)")
IDLE = "127.0.0.1:9092/1: Disconnected (after 600012ms in state UP)"
TLS_GONE = ("ssl://127.0.0.1:59003/bootstrap: Disconnected: SSL connection closed by peer "
            "(after 12ms in state UP)")
ALL_DOWN = "1/1 brokers are down"
# The connection dropped (or the client closed) during the SASL exchange: librdkafka calls it
# a SASL authentication error (the first from a CI run of the secured Spark rescale, where it
# stopped the command as a wrong password; the second as kcat users reported it on exit).
SASL_DROPPED = ("sasl_ssl://127.0.0.1:38109/bootstrap: SASL authentication error: "
                "SaslAuthenticateRequest failed: Local: Broker transport failure (after 0ms in "
                "state DOWN)")
SASL_DESTROYED = ("sasl_ssl://127.0.0.1:38109/1: SASL authentication error: "
                  "SaslAuthenticateRequest failed: Local: Broker handle destroyed (after 3ms "
                  "in state AUTH_REQ)")


@pytest.mark.parametrize("text, code, kind, protocol, confirm", [
    (WRONG_PASSWORD, KafkaError._AUTHENTICATION, AUTHENTICATION, "SASL_SSL", False),
    (WRONG_PASSWORD, None, AUTHENTICATION, "SASL_SSL", False),  # the log line
    (WRONG_CA, KafkaError._SSL, CERTIFICATE, "SASL_SSL", False),
    (WRONG_CA, None, CERTIFICATE, "SASL_SSL", False),
    (PLAINTEXT_ON_TLS, None, PLAINTEXT_TO_TLS, "PLAINTEXT", True),
    (SASL_PLAINTEXT_ON_TLS, None, PLAINTEXT_TO_TLS, "SASL_PLAINTEXT", True),
    (PLAINTEXT_ON_TLS_HINTED, None, PLAINTEXT_TO_TLS, "PLAINTEXT", True),
    (TLS_ON_PLAINTEXT, KafkaError._TRANSPORT, TLS_TO_PLAINTEXT, "SASL_SSL", True),
    (TLS_ON_PLAINTEXT_BARE, None, TLS_TO_PLAINTEXT, "SASL_SSL", True),
    ("ssl://b:9093/1: SSL handshake failed: unexpected eof", KafkaError._SSL, TLS, "SSL", False),
])
def test_each_cause_is_read_from_librdkafkas_words(
    text: str, code: int | None, kind: str, protocol: str, confirm: bool,
) -> None:
    found = classify(text, code)
    assert found is not None
    assert (found.kind, found.protocol, found.confirm) == (kind, protocol, confirm)
    assert found.address in ("127.0.0.1:59003", "127.0.0.1:38985", "192.168.205.13:8080",
                             "b:9093")
    assert not found.detail.startswith(("sasl_ssl://", "127.0.0.1"))  # the broker's name cut


@pytest.mark.parametrize("text, code", [
    (REFUSED, KafkaError._TRANSPORT), (PLAIN_REFUSED, None), (IDLE, None), (TLS_GONE, None),
    (ALL_DOWN, KafkaError._ALL_BROKERS_DOWN),
    (SASL_DROPPED, KafkaError._TRANSPORT), (SASL_DROPPED, None),
    (SASL_DESTROYED, KafkaError._DESTROY), (SASL_DESTROYED, None),
    ("GroupCoordinator: Disconnected (after 1ms in state APIVERSION_QUERY)", None),
])
def test_a_broker_that_is_down_or_went_away_is_none_of_them(text: str, code: int | None) -> None:
    assert classify(text, code) is None


def test_a_dropped_sasl_exchange_is_retried_and_a_refused_one_is_fatal(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's clients keep going through a connection that dropped mid-authentication
    (logged as unreachable, nothing raised); a refused password stops them."""
    from millpond.kafka.outage import LogLimiter

    # A limiter of its own: an earlier test's "unreachable" line may still hold the shared one.
    monkeypatch.setattr("millpond.kafka.producer.LIMITER", LogLimiter())
    faults = ClientFaults("g", "127.0.0.1:38109")
    with caplog.at_level("WARNING", logger="millpond.kafka"):
        faults.on_client_error(KafkaError(KafkaError._TRANSPORT, SASL_DROPPED))
    assert faults.on_log("FAIL", SASL_DESTROYED) is False
    faults.check()  # nothing kept
    assert "unreachable" in caplog.text and "SaslAuthenticateRequest failed" in caplog.text
    faults.on_client_error(KafkaError(KafkaError._AUTHENTICATION, WRONG_PASSWORD))
    with pytest.raises(AuthenticationError, match="invalid credentials"):
        faults.check()


def test_each_line_names_the_cause_the_address_and_the_setting_to_fix() -> None:
    def line(text: str, code: int | None = None, ca: str | None = "/etc/ca.pem") -> str:
        found = classify(text, code)
        assert found is not None
        return str(describe(found, "b1:9094,b2:9094", "kafka", ca))

    assert "authentication failed with the Kafka brokers at b1:9094,b2:9094" in line(
        WRONG_PASSWORD)
    cert = line(WRONG_CA)
    assert cert.startswith("TLS certificate verification failed for the Kafka brokers at "
                           "b1:9094,b2:9094")
    assert "systems.kafka.ssl.ca.location (/etc/ca.pem)" in cert
    assert "ssl.ca.location is not set" in line(WRONG_CA, ca=None)
    plain = line(PLAINTEXT_ON_TLS)
    assert plain.startswith("protocol mismatch: the broker at 127.0.0.1:59003 speaks TLS")
    assert "security.protocol=PLAINTEXT" in plain
    assert "set systems.kafka.security.protocol=SASL_SSL" in plain
    tls = line(TLS_ON_PLAINTEXT)
    assert tls.startswith("protocol mismatch: the broker at 127.0.0.1:38985 speaks plaintext")
    assert "security.protocol=SASL_SSL" in tls and "systems.kafka.security.protocol" in tls
    for text, cls in ((WRONG_CA, TlsCertificateError), (PLAINTEXT_ON_TLS, ProtocolMismatchError),
                      (WRONG_PASSWORD, AuthenticationError)):
        found = classify(text)
        assert found is not None and isinstance(describe(found, "b"), cls)


@pytest.fixture
def closing_listener() -> Iterator[str]:
    """A port that accepts each connection and closes it at once, as a TLS listener does to
    a plaintext client, and as a proxy does in front of a broker still starting."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    server.close()


def test_a_suspected_mismatch_is_kept_only_once_the_listener_confirms_it(
    closing_listener: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A closing port is no proof: the same line from it is logged as it is, and nothing
    is raised; the listener answering TLS makes it the job's one fatal error, and the
    lines it explains are logged at DEBUG only."""
    faults = ClientFaults("g", closing_listener)
    line = PLAINTEXT_ON_TLS.replace("127.0.0.1:59003", closing_listener)
    assert faults.on_log("FAIL", line) is False
    faults.check()  # nothing kept
    asked: list[str] = []
    monkeypatch.setattr("millpond.kafka.faults.speaks_tls",
                        lambda address: asked.append(address) or True)
    assert faults.on_log("FAIL", line) is False  # asked again only after PROBE_EVERY_S
    monkeypatch.setattr("millpond.kafka.faults.PROBE_EVERY_S", 0.0)
    assert faults.on_log("FAIL", line) is True
    assert asked == [closing_listener]
    with pytest.raises(ProtocolMismatchError, match="speaks TLS"):
        faults.check()
    records: list[int] = []

    class Capture:
        def log(self, level: int, *_args: object) -> None:
            records.append(level)

    log = LibrdkafkaLog(Capture(), faults.on_log)  # type: ignore[arg-type]
    log.log(20, "%s [%s] %s", "FAIL", "rdkafka#producer-1", line)
    log.log(20, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
    assert records == [10, 20]


def test_the_probes_tell_a_closing_port_from_a_listener(closing_listener: str) -> None:
    assert probe.speaks_tls(closing_listener, timeout=1) is None
    assert probe.speaks_plaintext_kafka(closing_listener, timeout=1) is None
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        refused = f"127.0.0.1:{unused.getsockname()[1]}"
    assert probe.speaks_tls(refused, timeout=1) is None
    assert probe.split_address("[::1]:9092") == ("::1", 9092)

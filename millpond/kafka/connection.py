"""What a failed connection to Kafka means: a wrong password, a certificate the client does
not trust, or a ``security.protocol`` the broker's listener does not speak.

librdkafka retries all of these forever and, apart from a wrong password and a TLS error,
reports them as plain transport failures; only the text of its error (``error_cb``) or of
its ``FAIL`` log line tells them apart. :func:`classify` reads one such text (a pure
function); :func:`describe` is the one line a user sees. Two causes are only suspected from
the text, because a proxy in front of a broker that is still starting closes connections
the same way: :attr:`Diagnosis.confirm` says which, and :mod:`millpond.kafka.probe` asks
the listener itself before either is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from confluent_kafka import KafkaError

from millpond.kafka.errors import (
    AuthenticationError,
    ProtocolMismatchError,
    TlsCertificateError,
)

AUTHENTICATION = "authentication"  # SASL: a wrong user, password or mechanism
CERTIFICATE = "certificate"  # TLS: the broker's certificate is not signed by a trusted CA
TLS = "tls"  # TLS: any other handshake failure
PLAINTEXT_TO_TLS = "plaintext-to-tls"  # a plaintext client on a TLS listener
TLS_TO_PLAINTEXT = "tls-to-plaintext"  # a TLS client on a plaintext listener

# The broker a line is about, as librdkafka names it: ``sasl_ssl://127.0.0.1:9094/bootstrap``
# or ``127.0.0.1:9092/1`` (no prefix: PLAINTEXT); coordinators' logical names do not match.
_BROKER = re.compile(r"^(?:(?P<protocol>[a-z_]+)://)?(?P<address>\S+:\d+)/\S+: ")
_TLS_PROTOCOLS = ("ssl", "sasl_ssl")
# A SASL request that failed on the client's side ("SaslAuthenticateRequest failed: Local:
# Broker transport failure", "...: Local: Broker handle destroyed"): the connection dropped
# or the client closed during the exchange. librdkafka words it as a SASL authentication
# error, but no credential was refused; it reconnects and authenticates again.
_SASL_LOCAL_FAILURE = re.compile(r"sasl\w*request failed: local: ", re.I)


@dataclass(frozen=True)
class Diagnosis:
    """One failed connection's cause.

    ``address``: the broker's ``host:port`` ("" if the text does not say);
    ``protocol``: the client's ``security.protocol`` there (upper case, "" if unknown);
    ``confirm``: the cause is only suspected until the listener is probed."""

    kind: str
    address: str
    protocol: str
    detail: str
    confirm: bool = False


def classify(text: str, code: int | None = None) -> Diagnosis | None:
    """The cause of a failed connection from librdkafka's error text or ``FAIL`` log line
    (the thread tag removed), and the error's code if it came from ``error_cb``; None for
    anything else (a broker that is down, a timeout, any other error)."""
    broker = _BROKER.match(text)
    protocol = (broker.group("protocol") or "plaintext") if broker else ""
    address = broker.group("address") if broker else ""
    detail = text[broker.end():] if broker else text

    def found(kind: str, confirm: bool = False) -> Diagnosis:
        return Diagnosis(kind, address, protocol.upper(), detail, confirm)

    lowered = text.lower()
    tls = protocol in _TLS_PROTOCOLS
    if code == KafkaError._AUTHENTICATION:
        return found(AUTHENTICATION)
    if "certificate verify failed" in lowered:
        return found(CERTIFICATE)
    if code == KafkaError._SSL:
        return found(TLS)
    if "sasl authentication error" in lowered and not _SASL_LOCAL_FAILURE.search(text):
        return found(AUTHENTICATION)
    if "connecting to a plaintext broker listener?" in lowered or (
            tls and "closed by peer" in lowered and "in state ssl_handshake" in lowered):
        # The broker closed the connection on the client's TLS hello (librdkafka adds the
        # hint to some of these lines only).
        return found(TLS_TO_PLAINTEXT, confirm=True)
    if broker and not tls and (
            "connecting to a ssl listener?" in lowered
            or ("disconnected" in lowered and "in state apiversion_query" in lowered)):
        # The broker closed the connection on the client's first request (ApiVersion): a
        # TLS listener reads it as a broken handshake. librdkafka adds a hint for this in
        # some versions only.
        return found(PLAINTEXT_TO_TLS, confirm=True)
    return None


def describe(diagnosis: Diagnosis, bootstrap: str, system: str = "kafka",
             ca_location: str | None = None) -> AuthenticationError:
    """The error a user sees for ``diagnosis``: what failed, where, and which setting of
    ``systems.<system>.`` to fix."""
    d, key = diagnosis, f"systems.{system}."
    at = d.address or bootstrap
    if d.kind == AUTHENTICATION:
        return AuthenticationError(
            f"authentication failed with the Kafka brokers at {bootstrap}: {d.detail}; check "
            f"{key}sasl.* (the mechanism, user and password)")
    if d.kind == CERTIFICATE:
        trusted = (f"the CA file in {key}ssl.ca.location ({ca_location})" if ca_location else
                   f"the system's CA store ({key}ssl.ca.location is not set)")
        return TlsCertificateError(
            f"TLS certificate verification failed for the Kafka brokers at {bootstrap}: the "
            f"broker's certificate is not signed by a CA in {trusted} (or names another "
            f"host); set {key}ssl.ca.location to the CA certificate (PEM) that signed it "
            f"({d.detail})")
    if d.kind == PLAINTEXT_TO_TLS:
        return ProtocolMismatchError(
            f"protocol mismatch: the broker at {at} speaks TLS (SSL or SASL_SSL) but this "
            f"client connects with security.protocol={d.protocol or 'PLAINTEXT'}; set "
            f"{key}security.protocol=SASL_SSL (or SSL) and {key}ssl.ca.location")
    if d.kind == TLS_TO_PLAINTEXT:
        return ProtocolMismatchError(
            f"protocol mismatch: the broker at {at} speaks plaintext (PLAINTEXT or "
            f"SASL_PLAINTEXT) but this client connects with security.protocol="
            f"{d.protocol or 'SSL'}; set {key}security.protocol to the listener's protocol, "
            "or use the broker's TLS port")
    return AuthenticationError(
        f"TLS handshake failed with the Kafka brokers at {bootstrap}: {d.detail}; check "
        f"{key}ssl.ca.location and the broker's certificate")

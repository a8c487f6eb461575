"""Ask a Kafka listener which protocol it speaks, to confirm a suspected protocol mismatch.

librdkafka sees a plaintext client on a TLS port and a TLS client on a plaintext port only
as connections the broker closed, as a proxy in front of a broker that is still starting
closes them too. One short connection settles it: a TLS listener answers a TLS handshake, a
plaintext Kafka listener answers an ApiVersions request. Each probe answers True (it does),
or None (no such answer: closed, refused, timed out), never raises.
"""

from __future__ import annotations

import socket
import ssl
import struct

PROBE_TIMEOUT_S = 2.0
_API_VERSIONS = 18
_CORRELATION_ID = 0x6D706F6E  # any value: the answer must echo it


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as a host and a port."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def speaks_tls(address: str, timeout: float = PROBE_TIMEOUT_S) -> bool | None:
    """True if a TLS server answers at ``address`` (its certificate is not checked: only
    the protocol is asked): the handshake completes, or the server answers with a TLS
    alert (a listener that wants a client certificate)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        host, port = split_address(address)
        with socket.create_connection((host, port), timeout) as sock, \
                context.wrap_socket(sock, server_hostname=host):
            return True
    except ssl.SSLError as exc:
        return True if "ALERT" in str(exc.reason or "").upper() else None
    except (OSError, ValueError):
        return None


def speaks_plaintext_kafka(address: str, timeout: float = PROBE_TIMEOUT_S) -> bool | None:
    """True if a plaintext Kafka listener at ``address`` answers an ApiVersions request
    (v0: the one every broker answers before anything else)."""
    client_id = b"millpond-probe"
    header = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(client_id)) + client_id
    try:
        host, port = split_address(address)
        with socket.create_connection((host, port), timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(header)) + header)
            answer = b""
            while len(answer) < 8:
                chunk = sock.recv(8 - len(answer))
                if not chunk:
                    return None
                answer += chunk
    except (OSError, ValueError):
        return None
    size, correlation = struct.unpack(">ii", answer)
    return True if size > 4 and correlation == _CORRELATION_ID else None

"""A throwaway certificate authority and a broker certificate for the secured dev broker.

Made with the ``cryptography`` package (the ``dev`` extra) when a secured broker first
starts: a CA, and a certificate for 127.0.0.1 and localhost signed by it that the broker
presents on its listeners and, as a client, to its own controller listener (mutual TLS). All
files are PEM, so the broker reads them as ``ssl.keystore.type=PEM`` /
``ssl.truststore.type=PEM`` and a client points ``ssl.ca.location`` at the CA file.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millpond.dev.errors import ToolMissingError

VALID_DAYS = 825


def write_private(path: Path, data: bytes | str) -> None:
    """Write ``path`` readable by its owner only (mode 0600 from creation, never wider)."""
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT
        os.write(fd, raw)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class DevCertificates:
    """The PEM files of one secured broker's TLS set-up, in ``directory``.

    ``ca.pem`` (the CA certificate: the broker's truststore and a client's
    ``ssl.ca.location``), ``broker.pem`` (the broker's PKCS#8 private key followed by its
    certificate chain: a PEM keystore, mode 0600). The CA's key is not kept: nothing else
    is ever signed by it."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.directory / "broker.pem"

    def exist(self) -> bool:
        return self.ca.exists() and self.keystore.exists()

    def ensure(self, subject: str = "broker") -> DevCertificates:
        """Make the CA and the broker certificate unless they are there already."""
        if not self.exist():
            self.make(subject)
        return self

    def make(self, subject: str = "broker") -> None:
        """Make a new CA and a broker certificate (CN=``subject``, SAN 127.0.0.1 and
        localhost, usable for server and client authentication)."""
        x509, hashes, serialization, ec, NameOID, ExtendedKeyUsageOID = _crypto()
        now = datetime.datetime.now(datetime.UTC)
        start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "millpond dev CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name).issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256())
        )

        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.DNSName("localhost"),
            ]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([
                ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )

        pem = serialization.Encoding.PEM
        self.directory.mkdir(parents=True, exist_ok=True)
        key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        write_private(self.keystore, key_pem + cert.public_bytes(pem) + ca_cert.public_bytes(pem))
        self.ca.write_bytes(ca_cert.public_bytes(pem))


def _crypto() -> tuple[Any, ...]:
    """The ``cryptography`` modules, or a :class:`ToolMissingError` saying how to get them."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:
        raise ToolMissingError(
            "the secured dev broker makes its certificates with the `cryptography` package: "
            "pip install 'millpond[dev]' (or `make install`)") from exc
    return x509, hashes, serialization, ec, NameOID, ExtendedKeyUsageOID

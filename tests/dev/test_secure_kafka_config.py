"""The secured dev broker's configuration, certificates and secrets, without starting it."""

from __future__ import annotations

import ssl
from pathlib import Path

from millpond.dev.kafka import _argfile_quote
from millpond.dev.secure_kafka import SecureLocalKafka
from millpond.dev.tls import DevCertificates


def test_certificates_are_pem_and_verify_for_127_0_0_1(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    certs = DevCertificates(tmp_path / "tls").ensure("broker")
    assert certs.keystore.stat().st_mode & 0o777 == 0o600
    pem = certs.keystore.read_text()
    assert pem.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, unencrypted: Kafka's PEM
    assert pem.count("-----BEGIN CERTIFICATE-----") == 2  # broker, then the CA

    chain = x509.load_pem_x509_certificates(pem.encode())
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    assert chain[1] == ca
    chain[0].verify_directly_issued_by(ca)
    san = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    usage = chain[0].extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usage) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    ssl.create_default_context(cafile=str(certs.ca))  # loads as a client's CA file

    before = certs.ca.read_bytes()
    certs.ensure("broker")
    assert certs.ca.read_bytes() == before, "made once, kept across restarts"


def test_server_properties_secure_every_listener(tmp_path: Path) -> None:
    broker = SecureLocalKafka(data_dir=tmp_path / "k", port=19094, controller_port=19095)
    props = broker.server_properties()
    assert props["listeners"] == "CLIENT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert props["listener.security.protocol.map"] == "CLIENT:SASL_SSL,CONTROLLER:SSL"
    assert props["inter.broker.listener.name"] == "CLIENT"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert "PLAINTEXT" not in props["listeners"] + props["listener.security.protocol.map"]
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["super.users"] == "User:broker;User:admin"
    assert props["ssl.keystore.type"] == props["ssl.truststore.type"] == "PEM"
    assert set(props["sasl.enabled.mechanisms"].split(",")) == {
        "SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"}
    # The passwords are made once and kept, 0600, for the restarts of this data dir.
    secrets = tmp_path / "k" / "secrets.json"
    assert secrets.stat().st_mode & 0o777 == 0o600
    again = SecureLocalKafka(data_dir=tmp_path / "k")
    assert again.admin_password == broker.admin_password


def test_format_adds_scram_users_in_kafkas_syntax(tmp_path: Path) -> None:
    broker = SecureLocalKafka(data_dir=tmp_path / "k")
    args = broker.format_args()
    scram = [args[i + 1] for i, a in enumerate(args) if a == "--add-scram"]
    pw = broker.admin_password
    assert f"SCRAM-SHA-512=[name=admin,password={pw}]" in scram
    assert f"SCRAM-SHA-256=[name=admin,password={pw}]" in scram
    assert any(s.startswith("SCRAM-SHA-512=[name=broker,password=") for s in scram)
    assert pw.isalnum()  # nothing SCRAM's [name=...,password=...] syntax would split on


def test_defaults_beside_the_plaintext_broker() -> None:
    from millpond.dev.kafka import LocalKafka

    secure, plain = SecureLocalKafka(), LocalKafka()
    assert secure.data_dir.name == "secure-data" and secure.data_dir != plain.data_dir
    if not (secure.data_dir / "broker.json").exists():
        assert (secure.port, secure.controller_port) == (9094, 9095)


def test_argfile_quoting() -> None:
    assert _argfile_quote('a "b" c\\d') == '"a \\"b\\" c\\\\d"'

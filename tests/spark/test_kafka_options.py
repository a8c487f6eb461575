"""The job's librdkafka settings as Spark's Kafka source options (millpond.spark.kafka_options):
no JVM, no broker. tests/spark/test_kafka_options_jvm.py gives the results to the Java client
itself; tests/kafka/test_secure_spark.py runs the spark commands on the secured broker."""

from __future__ import annotations

import datetime
import logging
from pathlib import Path

import pytest

from millpond.config import Config
from millpond.spark.errors import KafkaSettingsError, SparkJobError
from millpond.spark.kafka_options import (
    OAUTH_HANDLER,
    PLAIN_MODULE,
    SCRAM_MODULE,
    jaas,
    java_kafka_options,
    looks_secret,
    pkcs8_key,
)
from millpond.spark.source import changelog_of, kafka_options

SCRAM = {"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
         "sasl.username": "counter", "sasl.password": "s3cret", "ssl.ca.location": "/etc/ca.pem"}


def test_scram_over_tls_becomes_a_jaas_line_and_a_pem_truststore() -> None:
    assert java_kafka_options(SCRAM) == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config":
            f'{SCRAM_MODULE} required username="counter" password="s3cret";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem",
    }


def test_plain_with_the_system_trust_store_and_no_host_name_check() -> None:
    options = java_kafka_options({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "KEY",
        "sasl.password": "SECRET", "ssl.ca.location": "probe",
        "ssl.endpoint.identification.algorithm": "none", "client.id": "me",
        "socket.send.buffer.bytes": "65536"})
    assert options == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": f'{PLAIN_MODULE} required username="KEY" password="SECRET";',
        "kafka.ssl.endpoint.identification.algorithm": "", "kafka.client.id": "me",
        "kafka.send.buffer.bytes": "65536"}


def test_jaas_values_are_escaped_as_kafkas_parser_reads_them() -> None:
    assert jaas("M", username='a"b', password="c\\d", scope=None) == \
        'M required username="a\\"b" password="c\\\\d";'


def test_sasl_settings_are_left_out_without_sasl_and_tls_without_tls() -> None:
    assert java_kafka_options({**SCRAM, "security.protocol": "SSL"}) == {
        "kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": "/etc/ca.pem"}
    assert java_kafka_options({**SCRAM, "security.protocol": "SASL_PLAINTEXT"}).keys() == {
        "kafka.security.protocol", "kafka.sasl.mechanism", "kafka.sasl.jaas.config"}
    assert java_kafka_options({}) == {}


def test_given_options_are_not_computed_and_unblock_what_cannot_be() -> None:
    given = {"kafka.sasl.jaas.config": "theirs", "kafka.ssl.truststore.location": "/x"}
    options = java_kafka_options(SCRAM, given=given)
    assert options == {"kafka.security.protocol": "SASL_SSL",
                       "kafka.sasl.mechanism": "SCRAM-SHA-512"}
    unsecured = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                 "sasl.oauthbearer.config": "principal=admin"}
    with pytest.raises(KafkaSettingsError, match="sasl.oauthbearer.method=default"):
        java_kafka_options(unsecured)
    assert "kafka.sasl.jaas.config" not in java_kafka_options(unsecured, given=given)
    # A truststore or keystore of the caller's replaces the translated one as a whole.
    own = java_kafka_options({**SCRAM, "ssl.ca.location": "/none", "ssl.ca.pem": "PEM",
                              "ssl.key.location": "/none/key"},
                             given={"kafka.ssl.truststore.certificates": "C",
                                    "kafka.ssl.keystore.location": "/k.p12"})
    assert not any(k.startswith(("kafka.ssl.truststore", "kafka.ssl.keystore")) for k in own)


def test_oidc_client_credentials() -> None:
    options = java_kafka_options({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app",
        "sasl.oauthbearer.client.secret": "xyz", "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1, identityPoolId=pool-2"})
    assert options == {
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER",
        "kafka.sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "kafka.sasl.login.callback.handler.class": OAUTH_HANDLER,
        "kafka.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'clientId="app" clientSecret="xyz" scope="kafka" '
            'extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";'}
    with pytest.raises(KafkaSettingsError, match="sasl.oauthbearer.client.secret"):
        java_kafka_options({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                            "sasl.oauthbearer.method": "oidc",
                            "sasl.oauthbearer.client.id": "app",
                            "sasl.oauthbearer.token.endpoint.url": "https://idp/token"})


def test_kerberos_with_a_keytab_else_the_ticket_cache() -> None:
    base = {"security.protocol": "SASL_PLAINTEXT", "sasl.kerberos.service.name": "kafka",
            "sasl.kerberos.principal": "job@EXAMPLE.COM"}
    options = java_kafka_options({**base, "sasl.kerberos.keytab": "/etc/job.keytab"})
    assert options["kafka.sasl.mechanism"] == "GSSAPI"  # librdkafka's default too
    assert options["kafka.sasl.kerberos.service.name"] == "kafka"
    assert options["kafka.sasl.jaas.config"] == (
        'com.sun.security.auth.module.Krb5LoginModule required useKeyTab="true" '
        'storeKey="true" keyTab="/etc/job.keytab" principal="job@EXAMPLE.COM";')
    assert 'useTicketCache="true"' in java_kafka_options(base)["kafka.sasl.jaas.config"]


def test_what_cannot_be_translated_is_named() -> None:
    with pytest.raises(KafkaSettingsError, match="needs sasl.password"):
        java_kafka_options({**SCRAM, "sasl.password": ""})
    with pytest.raises(KafkaSettingsError, match="sasl.mechanism=AWS_MSK_IAM"):
        java_kafka_options({**SCRAM, "sasl.mechanism": "AWS_MSK_IAM"})
    assert issubclass(KafkaSettingsError, SparkJobError)


def test_a_ca_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KafkaSettingsError, match="is a directory"):
        java_kafka_options({**SCRAM, "ssl.ca.location": str(tmp_path)})


def test_librdkafka_only_settings_are_left_out_tls_ones_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="millpond.spark.kafka_options"):
        options = java_kafka_options({**SCRAM, "statistics.interval.ms": "1000",
                                      "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384",
                                      "enable.ssl.certificate.verification": "true"})
    assert options == java_kafka_options(SCRAM)
    levels = {r.getMessage().split()[1]: r.levelname for r in caplog.records}
    assert levels == {"systems.*.statistics.interval.ms": "DEBUG",
                      "systems.*.ssl.cipher.suites": "WARNING"}
    assert "s3cret" not in caplog.text


def _key_and_certificate(tmp_path: Path, password: bytes | None = None) -> tuple[Path, Path]:
    """An RSA key in the PKCS#1 form openssl's genrsa writes (encrypted with ``password``)
    and a self-signed certificate for it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    key_file, cert_file = tmp_path / "client.key", tmp_path / "client.pem"
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.TraditionalOpenSSL,
                                           encryption))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_file, cert_file


def test_a_client_certificate_and_key_become_a_pem_keystore_in_pkcs8(tmp_path: Path) -> None:
    key, cert = _key_and_certificate(tmp_path, b"key-pw")
    mtls = {"security.protocol": "SSL", "ssl.ca.location": "/etc/ca.pem",
            "ssl.certificate.location": str(cert), "ssl.key.location": str(key),
            "ssl.key.password": "key-pw"}
    options = java_kafka_options(mtls)
    assert options["kafka.ssl.keystore.type"] == "PEM"
    assert options["kafka.ssl.keystore.certificate.chain"] == cert.read_text()
    pem = options["kafka.ssl.keystore.key"]
    assert pem.startswith("-----BEGIN PRIVATE KEY-----") and "ENCRYPTED" not in pem
    assert "kafka.ssl.key.password" not in options  # the key is given decrypted
    assert pkcs8_key(pem) == pem  # already the Java client's form: passed as it is
    assert java_kafka_options({**mtls, "ssl.key.location": "", "ssl.key.pem": pem})[
        "kafka.ssl.keystore.key"] == pem.strip()

    with pytest.raises(KafkaSettingsError, match="ssl.key.password right"):
        java_kafka_options({**mtls, "ssl.key.password": "wrong"})
    with pytest.raises(KafkaSettingsError, match="set ssl.key.location too"):
        java_kafka_options({**mtls, "ssl.key.location": ""})
    with pytest.raises(KafkaSettingsError, match="ssl.certificate.location=.*No such file"):
        java_kafka_options({**mtls, "ssl.certificate.location": str(tmp_path / "none")})


def test_a_pkcs12_keystore_stays_one() -> None:
    assert java_kafka_options({"security.protocol": "SSL",
                               "ssl.keystore.location": "/etc/client.p12",
                               "ssl.keystore.password": "pw"}) == {
        "kafka.security.protocol": "SSL", "kafka.ssl.keystore.type": "PKCS12",
        "kafka.ssl.keystore.location": "/etc/client.p12", "kafka.ssl.keystore.password": "pw"}


def test_secret_options_are_recognized() -> None:
    assert all(map(looks_secret, ("kafka.sasl.jaas.config", "kafka.ssl.key.password",
                                  "kafka.ssl.keystore.key", "kafka.ssl.keystore.password")))
    assert not any(map(looks_secret, ("kafka.security.protocol", "kafka.ssl.truststore.location",
                                      "kafka.sasl.oauthbearer.token.endpoint.url")))


def test_the_spark_source_gets_the_jobs_settings_group_prefix_and_the_callers_options(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "job.properties"
    conf.write_text("job.name=counter\njob.id=2\nsystems.kafka.bootstrap.servers=b:9094\n"
                    "stores.counts.factory=rocksdb\nstores.counts.changelog=kafka.counts-log\n"
                    "stores.counts.key.serde=string\nstores.counts.msg.serde=json\n"
                    + "".join(f"systems.kafka.{k}={v}\n" for k, v in SCRAM.items()))
    changelog = changelog_of(Config.load(conf), "counts",
                             {"kafka.ssl.truststore.location": "/mine.pem"},
                             resolve_generation=False)
    assert changelog.group_id == "counter-2-spark"
    assert "s3cret" not in repr(changelog)
    options = kafka_options(changelog)
    assert options["groupIdPrefix"] == "counter-2-spark"
    assert options["kafka.bootstrap.servers"] == "b:9094"
    assert options["kafka.sasl.jaas.config"].endswith('password="s3cret";')
    assert options["kafka.ssl.truststore.location"] == "/mine.pem"

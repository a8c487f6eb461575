"""The Java Kafka client itself takes what millpond.spark.kafka_options makes of librdkafka
settings: Kafka's JAAS parser reads the login lines back, a consumer made with a PEM keystore
from a PKCS#1 key loads it, and one made for OIDC fetches its token from a local token
endpoint with the client's id, secret and scope. (Mechanisms the secured test broker serves,
SCRAM over TLS, run end to end in tests/kafka/test_secure_spark.py.)"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from millpond.spark.kafka_options import SCRAM_MODULE, java_kafka_options
from tests.spark.test_kafka_options import _key_and_certificate

pytestmark = pytest.mark.spark


def _jvm(spark: Any) -> Any:
    return spark.sparkContext._jvm


def _consumer(spark: Any, options: dict[str, str]) -> Any:
    """A Java KafkaConsumer made (not connected) with the ``kafka.`` options; making one
    configures its TLS and SASL (loads key stores, logs in)."""
    jvm = _jvm(spark)
    props = jvm.java.util.Properties()
    settings = {"kafka.bootstrap.servers": "127.0.0.1:9", "kafka.group.id": "t", **options}
    for key, value in settings.items():
        props.setProperty(key.removeprefix("kafka."), value)
    deserializer = jvm.org.apache.kafka.common.serialization.ByteArrayDeserializer
    return jvm.org.apache.kafka.clients.consumer.KafkaConsumer(props, deserializer(),
                                                               deserializer())


def test_kafkas_jaas_parser_reads_the_login_line_back(spark: Any) -> None:
    password = 'p"a\\ss word;}'
    options = java_kafka_options({"security.protocol": "SASL_SSL",
                                  "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
                                  "sasl.password": password})
    config = _jvm(spark).org.apache.kafka.common.security.JaasConfig(
        "KafkaClient", options["kafka.sasl.jaas.config"])
    (entry,) = config.getAppConfigurationEntry("KafkaClient")
    assert entry.getLoginModuleName() == SCRAM_MODULE
    assert dict(entry.getOptions()) == {"username": "u", "password": password}


def test_a_pem_keystore_from_an_encrypted_pkcs1_key_loads(spark: Any, tmp_path: Path) -> None:
    key, cert = _key_and_certificate(tmp_path, b"key-pw")
    options = java_kafka_options({
        "security.protocol": "SSL", "ssl.ca.location": str(cert),
        "ssl.certificate.location": str(cert), "ssl.key.location": str(key),
        "ssl.key.password": "key-pw"})
    _consumer(spark, options).close()  # raises on a key or certificate the JVM cannot read
    with pytest.raises(Exception, match="Invalid PEM keystore"):
        _consumer(spark, {**options, "kafka.ssl.keystore.key": key.read_text()})


def _jwt_part(doc: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")


class _TokenEndpoint(BaseHTTPRequestHandler):
    """An OAuth token endpoint: records each request, answers with an unsigned JWT."""

    requests: list[dict[str, str]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.requests.append({"authorization": self.headers.get("Authorization", ""),
                              "body": body})
        now = int(time.time())
        token = ".".join([_jwt_part({"alg": "none"}),
                          _jwt_part({"sub": "app", "iat": now, "exp": now + 3600}), "sig"])
        answer = json.dumps({"access_token": token, "token_type": "bearer",
                             "expires_in": 3600}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def token_endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()


def test_oidc_client_credentials_fetch_a_token(spark: Any, token_endpoint: str) -> None:
    _TokenEndpoint.requests.clear()
    options = java_kafka_options({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app",
        "sasl.oauthbearer.client.secret": "s3cret", "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.token.endpoint.url": token_endpoint})
    _consumer(spark, options).close()  # logs in when made: fetches its first token
    (request,) = _TokenEndpoint.requests
    assert request["authorization"] == "Basic " + base64.b64encode(b"app:s3cret").decode()
    assert "grant_type=client_credentials" in request["body"]
    assert "scope=kafka" in request["body"]

"""The job's librdkafka connection settings as the Java Kafka client's, for Spark's Kafka source.

A job writes its connection settings once, in librdkafka's words (``systems.<s>.security.
protocol``, ``sasl.*``, ``ssl.*``). Spark reads Kafka with the Java client, which spells some
of them differently and takes credentials as a JAAS line; :func:`java_kafka_options` turns
the settings into Spark Kafka source options (``kafka.<java key>``):

- ``security.protocol``, ``sasl.mechanism(s)`` as they are; ``sasl.username`` and
  ``sasl.password`` become ``sasl.jaas.config`` with the PLAIN or SCRAM login module;
- OAUTHBEARER with ``sasl.oauthbearer.method=oidc`` (OIDC client credentials): the token
  endpoint, and the client id, secret, scope and extensions in the JAAS line of Kafka's
  ``OAuthBearerLoginModule`` with its ``OAuthBearerLoginCallbackHandler``. librdkafka's other
  OAUTHBEARER methods (unsecured test tokens, a token refresh callback) have no Java
  counterpart: refused, naming the key;
- GSSAPI: the Kerberos service name, and a ``Krb5LoginModule`` line from the keytab and
  principal (else the ticket cache);
- TLS: a PEM CA file (``ssl.ca.location``) or text (``ssl.ca.pem``) becomes a PEM truststore;
  a client certificate and key (``ssl.certificate.location``/``ssl.key.location`` or their
  ``.pem`` texts) a PEM keystore given as text (``ssl.keystore.key``,
  ``ssl.keystore.certificate.chain``: the Java client takes a PEM keystore file only with key
  and certificate in one file, and text also reaches executors on other machines); a PKCS#12
  ``ssl.keystore.location`` stays a PKCS#12 keystore; ``ssl.endpoint.identification.algorithm
  =none`` is the Java client's empty value;
- a few connection settings both clients share (``client.id``, backoffs, ...).

Every other setting is librdkafka's alone and is left out (logged at DEBUG; the TLS ones
that change what is accepted at WARNING). Options the caller gives itself (``given``, from
``--kafka-option``) are not computed, and a setting that cannot be translated is no error
when the caller gives what it would have become.

The Java client's PEM reader takes PKCS#8 keys only, and decrypts an encrypted one with JCE
algorithms that do not include PBES2 on Java 17; a key in another form (PKCS#1 ``RSA
PRIVATE KEY``, ``EC PRIVATE KEY``) or encrypted is re-encoded as unencrypted PKCS#8 in
memory with ``cryptography`` (installed with the dev extra), or refused naming the openssl
command that converts it. The results hold secrets: they go to Spark through the Python
driver (``DataFrameReader.option``), never on a command line.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from pathlib import Path

from millpond.spark.errors import KafkaSettingsError

log = logging.getLogger(__name__)

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
OAUTH_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"

# librdkafka settings the Java client has under the same name and meaning.
SAME: tuple[str, ...] = (
    "client.id", "client.rack", "client.dns.lookup", "metadata.max.age.ms",
    "reconnect.backoff.ms", "reconnect.backoff.max.ms", "retry.backoff.ms",
    "socket.connection.setup.timeout.ms", "connections.max.idle.ms",
    "sasl.kerberos.service.name", "sasl.oauthbearer.token.endpoint.url",
)
RENAMED: dict[str, str] = {
    "socket.send.buffer.bytes": "send.buffer.bytes",
    "socket.receive.buffer.bytes": "receive.buffer.bytes",
}
# Read by the translation below (their meaning is in other options).
CONSUMED: frozenset[str] = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "sasl.oauthbearer.method", "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions",
    "sasl.kerberos.keytab", "sasl.kerberos.principal", "ssl.ca.location", "ssl.ca.pem",
    "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem",
    "ssl.key.password", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
})
# librdkafka's TLS settings the Java client has no counterpart for: left out, with a warning.
TLS_UNMAPPED: dict[str, str] = {
    "enable.ssl.certificate.verification": "the Java client always verifies the broker's "
                                           "certificate (give it the CA instead)",
    "ssl.cipher.suites": "OpenSSL cipher names; the Java client's defaults apply",
    "ssl.curves.list": "OpenSSL curve names; the Java client's defaults apply",
    "ssl.sigalgs.list": "OpenSSL signature algorithms; the Java client's defaults apply",
    "ssl.crl.location": "the Java client takes no CRL file",
}


def java_kafka_options(settings: Mapping[str, str],
                       given: Collection[str] = ()) -> dict[str, str]:
    """Spark Kafka source options (``kafka.``-prefixed) equivalent to librdkafka
    ``settings``; an option in ``given`` is left to the caller. Raises
    :class:`KafkaSettingsError` for a setting with no Java equivalent the caller did not
    give (it names the setting)."""
    s = {k: str(v).strip() for k, v in settings.items() if v is not None}
    out: dict[str, str] = {}
    for key in SAME:
        if s.get(key):
            out[key] = s[key]
    for key, java in RENAMED.items():
        if s.get(key):
            out[java] = s[key]
    protocol = s.get("security.protocol", "").upper()
    if protocol:
        out["security.protocol"] = protocol
    if protocol.startswith("SASL_"):
        out.update(_sasl(s, {k.removeprefix("kafka.") for k in given}))
    if protocol in ("SSL", "SASL_SSL"):
        out.update(_tls(s, {k.removeprefix("kafka.") for k in given}))
    for key in sorted(s.keys() - CONSUMED - set(SAME) - RENAMED.keys()):
        if key == "enable.ssl.certificate.verification" and s[key].lower() == "true":
            continue  # the Java client's behaviour too
        if key in TLS_UNMAPPED:
            log.warning("spark: systems.*.%s is not given to Spark's Kafka client: %s",
                        key, TLS_UNMAPPED[key])
        else:
            log.debug("spark: systems.*.%s is librdkafka's alone; not given to Spark", key)
    return {f"kafka.{k}": v for k, v in out.items() if f"kafka.{k}" not in given}


def _sasl(s: Mapping[str, str], given: Collection[str]) -> dict[str, str]:
    """``sasl.mechanism`` and ``sasl.jaas.config`` (and what the mechanism needs besides)."""
    mechanism = (s.get("sasl.mechanism") or s.get("sasl.mechanisms") or "GSSAPI").upper()
    out = {"sasl.mechanism": mechanism}
    if "sasl.jaas.config" in given:
        return out
    if mechanism == "PLAIN" or mechanism.startswith("SCRAM-"):
        module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
        missing = [k for k in ("sasl.username", "sasl.password") if not s.get(k)]
        if missing:
            raise KafkaSettingsError(
                f"sasl.mechanism={mechanism} needs {' and '.join(missing)} (systems.<system>."
                f"{missing[0]}) for Spark's Kafka client")
        out["sasl.jaas.config"] = jaas(module, username=s["sasl.username"],
                                       password=s["sasl.password"])
    elif mechanism == "OAUTHBEARER":
        out.update(_oauthbearer(s))
    elif mechanism == "GSSAPI":
        if s.get("sasl.kerberos.keytab"):
            out["sasl.jaas.config"] = jaas(
                KERBEROS_MODULE, useKeyTab="true", storeKey="true",
                keyTab=s["sasl.kerberos.keytab"], principal=s.get("sasl.kerberos.principal"))
        else:
            out["sasl.jaas.config"] = jaas(KERBEROS_MODULE, useTicketCache="true",
                                           principal=s.get("sasl.kerberos.principal"))
    else:
        raise KafkaSettingsError(
            f"sasl.mechanism={mechanism}: millpond cannot build the Java client's JAAS "
            "settings for it; give Spark kafka.sasl.jaas.config yourself")
    return out


def _oauthbearer(s: Mapping[str, str]) -> dict[str, str]:
    """OIDC client credentials: the token endpoint, the login module and its handler."""
    method = s.get("sasl.oauthbearer.method", "default").lower()
    if method != "oidc":
        raise KafkaSettingsError(
            f"sasl.oauthbearer.method={method}: Spark's Kafka client is given OAUTHBEARER "
            "settings for sasl.oauthbearer.method=oidc only (librdkafka's unsecured test "
            "tokens and token callbacks have no Java counterpart); give Spark "
            "kafka.sasl.jaas.config yourself")
    for key in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id",
                "sasl.oauthbearer.client.secret"):
        if not s.get(key):
            raise KafkaSettingsError(f"sasl.oauthbearer.method=oidc needs {key} "
                                     f"(systems.<system>.{key}) for Spark's Kafka client")
    extensions = {}
    for item in filter(None, (i.strip() for i in s.get("sasl.oauthbearer.extensions", "")
                              .split(","))):
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise KafkaSettingsError(f"sasl.oauthbearer.extensions: {item!r} is not "
                                     "name=value")
        extensions[f"extension_{name.strip()}"] = value.strip()
    return {
        "sasl.login.callback.handler.class": OAUTH_HANDLER,
        "sasl.jaas.config": jaas(OAUTH_MODULE, clientId=s["sasl.oauthbearer.client.id"],
                                 clientSecret=s["sasl.oauthbearer.client.secret"],
                                 scope=s.get("sasl.oauthbearer.scope"), **extensions),
    }


def _tls(s: Mapping[str, str], given: Collection[str]) -> dict[str, str]:
    """Trust and key stores in PEM (or PKCS#12 as given), and host name verification."""
    out: dict[str, str] = {}
    algorithm = s.get("ssl.endpoint.identification.algorithm")
    if algorithm:
        out["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" \
            else algorithm.lower()
    ca = s.get("ssl.ca.location")
    if any(k.startswith("ssl.truststore.") for k in given):
        pass  # the caller's truststore
    elif ca and ca != "probe":
        if Path(ca).is_dir():
            raise KafkaSettingsError(
                f"ssl.ca.location={ca} is a directory: the Java client takes one PEM file of "
                "CA certificates (concatenate them, or give Spark kafka.ssl.truststore.*)")
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    elif s.get("ssl.ca.pem"):
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.certificates"] = s["ssl.ca.pem"]
    if any(k.startswith("ssl.keystore.") for k in given):
        return out  # the caller's keystore
    if s.get("ssl.keystore.location"):
        out["ssl.keystore.type"] = "PKCS12"
        out["ssl.keystore.location"] = s["ssl.keystore.location"]
        if s.get("ssl.keystore.password"):
            out["ssl.keystore.password"] = s["ssl.keystore.password"]
        return out
    has_cert = bool(s.get("ssl.certificate.location") or s.get("ssl.certificate.pem"))
    has_key = bool(s.get("ssl.key.location") or s.get("ssl.key.pem"))
    if not (has_cert or has_key):
        return out
    if has_cert != has_key:
        missing = "ssl.key.location" if has_cert else "ssl.certificate.location"
        raise KafkaSettingsError(f"a client certificate needs its key and a key its "
                                 f"certificate: set {missing} too")
    out["ssl.keystore.type"] = "PEM"
    out["ssl.keystore.certificate.chain"] = _text(s, "ssl.certificate")
    out["ssl.keystore.key"] = pkcs8_key(_text(s, "ssl.key"), s.get("ssl.key.password"))
    return out


def _text(s: Mapping[str, str], prefix: str) -> str:
    """``<prefix>.pem``, else the file ``<prefix>.location`` names."""
    if s.get(f"{prefix}.pem"):
        return s[f"{prefix}.pem"]
    path = s[f"{prefix}.location"]
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise KafkaSettingsError(f"{prefix}.location={path}: {exc.strerror or exc}") from exc


_PKCS8 = "-----BEGIN PRIVATE KEY-----"


def pkcs8_key(pem: str, password: str | None = None) -> str:
    """``pem`` as an unencrypted PKCS#8 PEM key, the one form the Java client's PEM keystore
    reads on every Java version (see the module doc)."""
    encrypted = "ENCRYPTED" in pem  # PKCS#8's BEGIN ENCRYPTED, or PEM's Proc-Type header
    if _PKCS8 in pem and not encrypted:
        return pem
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise KafkaSettingsError(
            "the client key (ssl.key.location) is not an unencrypted PKCS#8 key, the form "
            "Spark's Kafka client reads: convert it with `openssl pkcs8 -topk8 -nocrypt -in "
            "KEY -out KEY.pk8` (or pip install cryptography, which millpond then uses)"
        ) from None
    try:
        key = serialization.load_pem_private_key(
            pem.encode(), password.encode() if password and encrypted else None)
    except (ValueError, TypeError) as exc:
        raise KafkaSettingsError(f"the client key (ssl.key.location) cannot be read: {exc} "
                                 "(is ssl.key.password right?)") from exc
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def jaas(module: str, **options: str | None) -> str:
    """A JAAS line ``<module> required k="v" ...;`` (unset options left out; ``\\`` and
    ``"`` escaped as Kafka's JAAS parser reads them)."""
    def quote(value: str) -> str:
        escaped = (value.replace("\\", "\\\\").replace('"', '\\"')
                   .replace("\n", "\\n").replace("\r", "\\r"))
        return f'"{escaped}"'

    parts = "".join(f" {k}={quote(v)}" for k, v in options.items() if v is not None)
    return f"{module} required{parts};"


def looks_secret(option: str) -> bool:
    """True for a Spark Kafka option whose value is a secret (a password, a key, a JAAS
    line), which does not belong on a command line."""
    name = option.lower()
    return any(word in name for word in ("password", "jaas", "secret", "keystore.key"))


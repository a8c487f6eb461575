"""A secured single-node dev broker: SASL over TLS, SCRAM users, ACLs enforced.

:class:`SecureLocalKafka` is :class:`~millpond.dev.kafka.LocalKafka` with other listeners:

- ``CLIENT`` (``SASL_SSL``, 127.0.0.1:9094 by default) for clients and for the broker's own
  inter-broker connections: SCRAM-SHA-512 and SCRAM-SHA-256 (users in the cluster metadata,
  the first made by ``kafka-storage format --add-scram``, more at run time through the admin
  user, see :mod:`millpond.dev.kafka_security`), and PLAIN for the ``admin`` user only (PLAIN
  users live in the broker's config, not in the metadata);
- ``CONTROLLER`` (``SSL`` with client certificates required, 127.0.0.1:9095): KRaft does not
  take SCRAM on the controller listener (its credentials are in the metadata the controller
  serves), so the broker reaches its controller with its certificate, whose ``CN=broker``
  maps to the principal ``User:broker``.

``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a principal without
ACLs may do nothing; ``User:broker`` and ``User:admin`` are super users. Secrets are made at
first start and kept in the data dir in files only the owner can read: ``secrets.json`` (the
broker's and admin's passwords), ``server.properties`` (the JAAS settings) and
``admin.properties`` (the librdkafka settings of the admin user, for people and tools).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from millpond.dev.kafka import Echo, LocalKafka, _quiet
from millpond.dev.tls import DevCertificates, write_private

SECURE_PORT = 9094
SECURE_CONTROLLER_PORT = 9095
SECURE_HEAP = "-Xmx384m -Xms64m"
ADMIN_USER = "admin"
BROKER_USER = "broker"
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
ADMIN_MECHANISM = "SCRAM-SHA-512"

_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _new_password() -> str:
    """A random password of letters and digits (nothing SCRAM's or JAAS's syntax would
    read: no ``,``, ``]``, ``=`` or quotes)."""
    return secrets.token_hex(24)


def _jaas(module: str, **options: str) -> str:
    return module + " required" + "".join(f' {k}="{v}"' for k, v in options.items()) + ";"


class SecureLocalKafka(LocalKafka):
    """A single-node KRaft broker whose clients connect with SASL_SSL and need ACLs.

    Its own port (9094, controller 9095) and data dir (``kafka-<version>/secure-data``), so
    it runs beside the plaintext dev broker."""

    default_port = SECURE_PORT
    default_controller_port = SECURE_CONTROLLER_PORT
    data_dir_name = "secure-data"

    default_heap = SECURE_HEAP

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.certificates = DevCertificates(self.data_dir / "tls")

    # -- files a client uses ----------------------------------------------------------------

    @property
    def ca_file(self) -> Path:
        """The CA certificate (PEM): a client's ``ssl.ca.location``."""
        return self.certificates.ca

    @property
    def admin_properties(self) -> Path:
        """The admin user's librdkafka settings, password included (mode 0600)."""
        return self.data_dir / "admin.properties"

    @property
    def _secrets_path(self) -> Path:
        return self.data_dir / "secrets.json"

    def _secrets(self) -> dict[str, str]:
        """The broker's and admin's passwords: made once, kept (0600) for restarts."""
        try:
            saved = json.loads(self._secrets_path.read_text())
            if isinstance(saved, dict) and {ADMIN_USER, BROKER_USER} <= saved.keys():
                return {str(k): str(v) for k, v in saved.items()}
        except (OSError, ValueError):
            pass
        made = {ADMIN_USER: _new_password(), BROKER_USER: _new_password()}
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_private(self._secrets_path, json.dumps(made))
        return made

    @property
    def admin_password(self) -> str:
        return self._secrets()[ADMIN_USER]

    def user_config(self, username: str, password: str,
                    mechanism: str = ADMIN_MECHANISM) -> dict[str, str]:
        """librdkafka settings for ``username`` on this broker (SASL_SSL, the dev CA)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": mechanism,
            "sasl.username": username,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca_file),
        }

    def client_config(self) -> dict[str, str]:
        """The admin user's librdkafka settings (a super user)."""
        return self.user_config(ADMIN_USER, self.admin_password)

    def connection_help(self) -> str:
        """What ``millpond dev kafka start --secure`` prints: the address, and a job's
        client settings as properties lines, the password left in the 0600 file."""
        conf = self.client_config()
        lines = [
            f"# Secured Kafka (SASL_SSL, ACLs on) on {self.bootstrap}; CA {self.ca_file}",
            f"# admin credentials (mode 0600): {self.admin_properties}",
            "# a job's settings (every client millpond makes gets them):",
            f"systems.kafka.bootstrap.servers={self.bootstrap}",
        ]
        lines += [f"systems.kafka.{k}={v}" for k, v in conf.items()
                  if k not in ("bootstrap.servers", "sasl.password")]
        lines.append(f"systems.kafka.sasl.password=<sasl.password in {self.admin_properties}>")
        return "\n".join(lines)

    # -- the broker's side --------------------------------------------------------------------

    def listener_properties(self) -> dict[str, str]:
        """SASL_SSL for clients and inter-broker traffic, mutual TLS to the controller, the
        PEM key and trust stores, SCRAM and PLAIN login modules, and the authorizer."""
        pw = self._secrets()
        keystore, ca = self.certificates.keystore, self.certificates.ca
        return {
            "listeners": (f"CLIENT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"CLIENT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "CLIENT",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,CONTROLLER:SSL",
            # TLS: one PEM keystore (key + chain) and the CA as the truststore, for the
            # listeners and for the broker's own client side.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca),
            "listener.name.controller.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            # SASL on the client listener: the broker is a SCRAM client of it too.
            "sasl.enabled.mechanisms": ",".join((*SCRAM_MECHANISMS, "PLAIN")),
            "sasl.mechanism.inter.broker.protocol": ADMIN_MECHANISM,
            "listener.name.client.scram-sha-512.sasl.jaas.config": _jaas(
                _SCRAM_MODULE, username=BROKER_USER, password=pw[BROKER_USER]),
            "listener.name.client.scram-sha-256.sasl.jaas.config": _jaas(_SCRAM_MODULE),
            "listener.name.client.plain.sasl.jaas.config": _jaas(
                _PLAIN_MODULE, **{f"user_{ADMIN_USER}": pw[ADMIN_USER]}),
            # ACLs: nothing is allowed without one, except to the super users.
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{BROKER_USER};User:{ADMIN_USER}",
        }

    def format_args(self) -> list[str]:
        """The SCRAM users made at format: the broker (its inter-broker login) and admin
        (with both SCRAM mechanisms)."""
        pw = self._secrets()
        users = [("SCRAM-SHA-512", BROKER_USER)] + [(m, ADMIN_USER) for m in SCRAM_MECHANISMS]
        args: list[str] = []
        for mechanism, name in users:
            args += ["--add-scram", f"{mechanism}=[name={name},password={pw[name]}]"]
        return args

    def start(self, timeout: float = 90.0, echo: Echo = _quiet) -> str:
        """Make the certificates and the admin's settings file, then start the broker."""
        if not self.status().running:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.data_dir.chmod(0o700)
            self.certificates.ensure(BROKER_USER)
            write_private(self.admin_properties, "".join(
                f"{k}={v}\n" for k, v in self.client_config().items()))
        return super().start(timeout, echo)

    def status_line(self) -> tuple[bool, str]:
        running, line = super().status_line()
        return running, f"{line} secure=SASL_SSL ca={self.ca_file}"

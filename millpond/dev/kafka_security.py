"""SCRAM users and ACLs of a secured broker, managed at run time through a super user.

:class:`SecurityAdmin` wraps confluent-kafka's ``AdminClient`` (``alter_user_scram_credentials``,
``create_acls``, ``delete_acls``), so no password is ever on a command line. Each change
returns once the broker serves it: KRaft applies a change when the broker replays the
controller's metadata record, a moment after the admin request returns, so each method waits
(bounded) until the broker's own describe shows the change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from millpond.dev.errors import DevError
from millpond.kafka import clients

SCRAM_ITERATIONS = 8192  # Kafka's minimum is 4096; the Java tools default to 4096
E = TypeVar("E", ResourceType, ResourcePatternType, AclOperation, AclPermissionType,
            ScramMechanism)


def _enum(kind: type[E], value: E | str) -> E:
    """``value`` as a member of ``kind``: ``"topic"``, ``"TOPIC"`` or ``ResourceType.TOPIC``;
    ``"SCRAM-SHA-512"`` for a mechanism."""
    if isinstance(value, kind):
        return value
    try:
        return kind[str(value).upper().replace("-", "_")]
    except KeyError:
        names = ", ".join(m.name for m in kind)
        raise ValueError(f"{value!r} is not a {kind.__name__} ({names})") from None


def principal_of(name: str) -> str:
    """``alice`` -> ``User:alice``; a name with a type (``User:alice``) is kept."""
    return name if ":" in name else f"User:{name}"


class SecurityAdmin:
    """Add and remove SCRAM users, grant and revoke ACLs, as ``admin_conf``'s user."""

    def __init__(self, admin_conf: Mapping[str, Any], timeout: float = 30.0) -> None:
        self._admin = clients.admin(admin_conf)
        self.timeout = timeout

    # -- users --------------------------------------------------------------------------------

    def add_user(self, name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        """Create (or change the password of) ``name`` for a SCRAM ``mechanism``."""
        mech = _enum(ScramMechanism, mechanism)
        info = ScramCredentialInfo(mech, SCRAM_ITERATIONS)
        upsert = UserScramCredentialUpsertion(name, info, password.encode())
        self._admin.alter_user_scram_credentials([upsert])[name].result(self.timeout)
        self._wait(lambda: mech in self._mechanisms(name), f"user {name} ({mechanism})")

    def remove_user(self, name: str, mechanism: str = "SCRAM-SHA-512") -> None:
        """Delete ``name``'s credential for ``mechanism``."""
        mech = _enum(ScramMechanism, mechanism)
        self._admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(name, mech)])[name].result(self.timeout)
        self._wait(lambda: mech not in self._mechanisms(name), f"removal of user {name}")

    def _mechanisms(self, name: str) -> set[ScramMechanism]:
        futures = self._admin.describe_user_scram_credentials([name])
        assert isinstance(futures, dict)  # one future per user when users are named
        try:
            desc = futures[name].result(self.timeout)
        except KafkaException:  # RESOURCE_NOT_FOUND: no credential at all
            return set()
        return {info.mechanism for info in desc.scram_credential_infos}

    # -- ACLs ---------------------------------------------------------------------------------

    def grant(self, principal: str, resource_type: ResourceType | str, name: str,
              pattern_type: ResourcePatternType | str, operation: AclOperation | str,
              host: str = "*") -> AclBinding:
        """Allow ``principal`` (``alice`` or ``User:alice``) ``operation`` on the resources
        ``name`` matches by ``pattern_type`` (``LITERAL``, ``PREFIXED``); e.g.
        ``grant("alice", "TOPIC", "orders", "LITERAL", "WRITE")``. Returns the binding."""
        binding = AclBinding(_enum(ResourceType, resource_type), name,
                             _enum(ResourcePatternType, pattern_type), principal_of(principal),
                             host, _enum(AclOperation, operation), AclPermissionType.ALLOW)
        self._admin.create_acls([binding])[binding].result(self.timeout)
        self._wait(lambda: binding in self.acls(principal), f"ACL {binding}")
        return binding

    def revoke(self, principal: str, resource_type: ResourceType | str, name: str,
               pattern_type: ResourcePatternType | str, operation: AclOperation | str,
               host: str = "*") -> None:
        """Remove the ALLOW ACL :meth:`grant` made with the same arguments."""
        match = AclBindingFilter(_enum(ResourceType, resource_type), name,
                                 _enum(ResourcePatternType, pattern_type),
                                 principal_of(principal), host, _enum(AclOperation, operation),
                                 AclPermissionType.ALLOW)
        self._admin.delete_acls([match])[match].result(self.timeout)
        self._wait(lambda: not any(_matches(match, b) for b in self.acls(principal)),
                   f"removal of ACL {match}")

    def acls(self, principal: str | None = None) -> list[AclBinding]:
        """The ACLs the broker enforces now (of ``principal`` if given)."""
        anything: Any = None  # a filter's None matches any (the type hints say str)
        match = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY,
                                 principal_of(principal) if principal else anything, anything,
                                 AclOperation.ANY, AclPermissionType.ANY)
        return list(self._admin.describe_acls(match).result(self.timeout))

    def _wait(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            if time.monotonic() > deadline:
                raise DevError(f"the broker did not apply the {what} within {self.timeout:.0f}s")
            time.sleep(0.05)


def _matches(match: AclBindingFilter, binding: AclBinding) -> bool:
    return (binding.restype, binding.name, binding.resource_pattern_type, binding.principal,
            binding.host, binding.operation, binding.permission_type) == (
        match.restype, match.name, match.resource_pattern_type, match.principal, match.host,
        match.operation, match.permission_type)

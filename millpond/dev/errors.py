"""Errors raised by the development tooling (the local Kafka broker)."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class DevError(MillpondError):
    """Base class for development-tooling errors."""


class ToolMissingError(DevError):
    """A required external tool (Java 17+, Maven) is missing or too old: install it."""

    exit_code = USER_ERROR


class ProvisionError(DevError):
    """The broker's jars could not be fetched from Maven Central."""


class BrokerStartError(DevError):
    """The broker process did not start or did not become ready in time."""


class PortInUseError(BrokerStartError):
    """The port a dev server was asked to listen on is taken by another process: stop it or
    choose another port (nothing was started)."""

    exit_code = USER_ERROR

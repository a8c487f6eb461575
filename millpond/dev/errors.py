"""Errors raised by the development tooling (the local Kafka broker)."""

from __future__ import annotations

from millpond.errors import MillpondError


class DevError(MillpondError):
    """Base class for development-tooling errors."""


class ToolMissingError(DevError):
    """A required external tool (Java 17+, Maven) is missing or too old."""


class ProvisionError(DevError):
    """The broker's jars could not be fetched from Maven Central."""


class BrokerStartError(DevError):
    """The broker process did not start or did not become ready in time."""

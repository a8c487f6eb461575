"""Errors of the metrics reporters."""

from __future__ import annotations

from millpond.config.errors import ConfigError
from millpond.errors import MillpondError


class MetricsError(MillpondError):
    """A metrics reporter could not start (e.g. its port is taken)."""


class MetricsConfigError(ConfigError, MetricsError):
    """A ``metrics.*`` key is missing, malformed or unknown; located at its file and line."""

"""Errors of the metrics reporters."""

from __future__ import annotations

from millpond.config.errors import ConfigError
from millpond.errors import USER_ERROR, MillpondError


class MetricsError(MillpondError):
    """A metrics reporter could not start (e.g. its port is taken: set another one)."""

    exit_code = USER_ERROR


class MetricsConfigError(ConfigError, MetricsError):
    """A ``metrics.*`` key is missing, malformed or unknown; located at its file and line."""

"""The query endpoint's errors."""

from __future__ import annotations

from millpond.errors import MillpondError


class QueryError(MillpondError):
    """The query endpoint cannot start (e.g. its address is taken)."""

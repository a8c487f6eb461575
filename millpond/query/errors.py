"""The query endpoint's errors."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class QueryError(MillpondError):
    """The query endpoint cannot start (e.g. its address is taken): a setting to change,
    so the CLI exits 2."""

    exit_code = USER_ERROR

"""Errors and warnings raised while reading job configuration."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class ConfigError(MillpondError):
    """A configuration problem, located as precisely as possible.

    ``str()`` reads like ``job.properties:12: stores.foo.key.serde: <what is wrong>``; the
    location and key parts are left out when unknown.
    """

    exit_code = USER_ERROR

    def __init__(
        self,
        message: str,
        *,
        key: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        self.message = message
        self.key = key
        self.file = file
        self.line = line
        super().__init__(message)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else ""
        where = where or (f"{self.file}: " if self.file else "")
        return f"{where}{self.key + ': ' if self.key else ''}{self.message}"


class ConfigWarning(UserWarning):
    """A suspicious but usable setting, e.g. an unknown store key (likely a typo)."""

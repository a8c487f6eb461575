"""Errors of state backups."""

from __future__ import annotations

from millpond.config.errors import ConfigError
from millpond.errors import MillpondError


class BackupError(MillpondError):
    """A backup could not be made, read or used."""


class BackupUnavailableError(BackupError):
    """The backup URI cannot be reached (or its filesystem library is missing)."""


class SnapshotCorruptError(BackupError):
    """A snapshot's manifest or files do not match (size, checksum, missing file)."""


class BackupConfigError(ConfigError, BackupUnavailableError):
    """job.state.backup.uri cannot be used as set: not set, not a URI fsspec can open, its
    filesystem library is missing, or its bucket does not exist (exit 2)."""

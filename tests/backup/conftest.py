"""Backup locations for the tests: a ``file://`` directory and a real S3 server (S3Proxy
on loopback, reached through ``s3://`` and s3fs, the code path of a user's bucket; the
session's ``s3`` fixture is tests/conftest.py's, shared with the streams and fault tests)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import S3


@pytest.fixture(params=["file", "s3"])
def backup_uri(request: pytest.FixtureRequest, tmp_path: Path,
               ) -> tuple[str, dict[str, Any]]:
    """(URI, fsspec options) of an empty backup location: a directory, then S3Proxy."""
    if request.param == "file":
        return f"file://{tmp_path / 'remote'}", {}
    server: S3 = request.getfixturevalue("s3")
    return server.uri(f"t-{uuid.uuid4().hex[:8]}"), server.options


@pytest.fixture
def make_location(backup_uri: tuple[str, dict[str, Any]]) -> Callable[[str], Any]:
    from millpond.backup import BackupLocation

    uri, options = backup_uri
    return lambda job="job-1": BackupLocation(uri, job, options)

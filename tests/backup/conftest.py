"""Backup locations for the tests: a ``file://`` directory and a real S3 server (S3Proxy
on loopback, reached through ``s3://`` and s3fs, the code path of a user's bucket)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unavailable


@dataclass
class S3:
    """The session's S3 server: its handle, fsspec options and one bucket for the tests."""

    server: Any
    options: dict[str, Any]
    bucket: str

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def properties(self, prefix: str) -> dict[str, str]:
        """``job.state.backup.*`` properties reaching this server."""
        opts = self.options
        return {"job.state.backup.uri": self.uri(prefix),
                "job.state.backup.options.key": opts["key"],
                "job.state.backup.options.secret": opts["secret"],
                "job.state.backup.options.client_kwargs.endpoint_url":
                    opts["client_kwargs"]["endpoint_url"],
                "job.state.backup.options.client_kwargs.region_name": "us-east-1"}


@contextmanager
def running_s3(data_dir: Path, bucket: str) -> Iterator[S3]:
    """A real S3Proxy on a free loopback port with ``bucket`` created, stopped on exit
    (fails in CI when it cannot start)."""
    import s3fs

    from millpond.dev.errors import DevError
    from millpond.dev.kafka import free_port
    from millpond.dev.s3 import LocalS3

    server = LocalS3(data_dir, port=free_port())
    try:
        server.start(timeout=90)
    except DevError as exc:
        unavailable(f"S3Proxy did not start: {exc}")
    try:
        fs = s3fs.S3FileSystem(**server.storage_options(), skip_instance_cache=True)
        fs.call_s3("create_bucket", Bucket=bucket)
        yield S3(server, server.storage_options(), bucket)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """A real S3Proxy for the session."""
    with running_s3(tmp_path_factory.mktemp("s3"), "millpond-backups") as server:
        yield server


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

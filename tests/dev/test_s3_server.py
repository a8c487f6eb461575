"""The local S3 server answers the S3 API through fsspec/s3fs, as a user's bucket would."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond.dev.kafka import free_port
from tests.conftest import unavailable
from tests.kafka_util import millpond


def test_s3proxy_serves_buckets_and_objects_through_s3fs(tmp_path: Path) -> None:
    import s3fs  # the s3 extra (make install installs it)

    from millpond.dev.errors import DevError
    from millpond.dev.s3 import LocalS3

    server = LocalS3(tmp_path / "s3", port=free_port())
    try:
        server.start(timeout=90)
    except DevError as exc:
        unavailable(f"S3Proxy did not start: {exc}")
    try:
        fs = s3fs.S3FileSystem(**server.storage_options())
        assert fs.ls("") == []
        # (s3fs's mkdir probes GetBucketLocation, which S3Proxy answers for any name, and so
        # takes a missing bucket for an existing one: create it with the S3 call itself)
        fs.call_s3("create_bucket", Bucket="millpond-test")
        assert fs.ls("", refresh=True) == ["millpond-test"]
        payload = bytes(range(256)) * 4096  # 1 MiB, binary
        with fs.open("millpond-test/a/b.bin", "wb") as f:
            f.write(payload)
        fs.pipe("millpond-test/a/c.txt", b"hello")
        assert fs.cat("millpond-test/a/b.bin") == payload
        assert sorted(fs.ls("millpond-test/a")) == ["millpond-test/a/b.bin", "millpond-test/a/c.txt"]
        assert fs.info("millpond-test/a/b.bin")["size"] == len(payload)
        fs.rm("millpond-test/a/c.txt")
        fs.invalidate_cache()
        assert not fs.exists("millpond-test/a/c.txt")
        # a wrong secret is refused: the server checks signatures
        bad = s3fs.S3FileSystem(**{**server.storage_options(), "secret": "wrong"},
                                skip_instance_cache=True)
        with pytest.raises(PermissionError):
            bad.cat("millpond-test/a/b.bin")
        # the CLI sees the same server
        status = millpond("dev", "s3", "--data-dir", str(tmp_path / "s3"), "status")
        assert status.returncode == 0 and server.endpoint in status.stdout
    finally:
        assert server.stop()
    stopped = millpond("dev", "s3", "--data-dir", str(tmp_path / "s3"), "status")
    assert stopped.returncode == 1 and "not running" in stopped.stdout

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


def test_dev_s3_start_status_stop_through_the_cli(tmp_path: Path) -> None:
    """`millpond dev s3 --data-dir D --port P start|status|stop` (docs/reference/cli.md): start
    prints the endpoint and the server answers S3 there with the printed key and secret, a
    second start reuses it, status names it (the port remembered in the data dir), stop ends
    its process, and status (exit 1) and stop then say it is not running."""
    import re

    import s3fs

    from millpond.dev.procs import alive
    from millpond.dev.s3 import LocalS3

    port, data = free_port(), tmp_path / "s3"
    cli = ("dev", "s3", "--data-dir", str(data), "--port", str(port))
    endpoint = f"http://127.0.0.1:{port}"
    try:
        started = millpond(*cli, "start", "--timeout", "90", timeout=150)
        assert started.returncode == 0, started.stdout + started.stderr
        assert started.stdout.strip() == endpoint, started.stdout
        status = millpond("dev", "s3", "--data-dir", str(data), "status")  # port from the dir
        assert status.returncode == 0, status.stdout + status.stderr
        m = re.fullmatch(r"running pid=(\d+) endpoint=(\S+) key=(\S+) secret=(\S+) data=(\S+)\n",
                         status.stdout)
        assert m and m.group(2) == endpoint and m.group(5) == str(data.resolve()), status.stdout
        pid = int(m.group(1))
        assert alive(pid)

        fs = s3fs.S3FileSystem(key=m.group(3), secret=m.group(4), skip_instance_cache=True,
                               client_kwargs={"endpoint_url": endpoint,
                                              "region_name": "us-east-1"})
        fs.call_s3("create_bucket", Bucket="cli-check")
        fs.pipe("cli-check/k", b"hello")
        assert fs.cat("cli-check/k") == b"hello"

        again = millpond(*cli, "start", timeout=120)
        assert again.returncode == 0 and again.stdout.strip() == endpoint, again.stderr
        assert f"running pid={pid} " in millpond(*cli, "status").stdout  # the same server

        stopped = millpond(*cli, "stop")
        assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped", stopped.stderr
        assert not alive(pid)
        after = millpond(*cli, "status")
        assert after.returncode == 1 and "not running" in after.stdout, after.stdout
        assert millpond(*cli, "stop").stdout.strip() == "not running"
    finally:
        LocalS3(data_dir=data, port=port).stop()

"""The dev servers' .properties files reach their JVMs unchanged: a data dir whose name has
a non-ASCII character and a backslash is where the broker writes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from millpond.config import parse_properties
from millpond.dev import properties as java_properties
from tests.cli.test_cli_dev import _free_port_pair, _java_and_jars_or_unavailable

ODD = "josé\\b-dätä ☃"


def test_written_as_java_reads_it(tmp_path: Path) -> None:
    props = {"log.dirs": f"/home/{ODD}/kraft-logs", "a key": "x=y:z #!", "empty": ""}
    path = tmp_path / "server.properties"
    java_properties.write(path, props, 0o600)
    raw = path.read_bytes()
    assert raw.isascii(), "non-ASCII characters go as \\uXXXX escapes"
    assert os.stat(path).st_mode & 0o777 == 0o600
    # read back by the rules of java.util.Properties.load(InputStream): ISO-8859-1
    back = parse_properties(raw.decode(java_properties.ENCODING))
    assert dict(back) == props


@pytest.mark.kafka
def test_broker_writes_to_a_data_dir_with_odd_characters(tmp_path: Path) -> None:
    """Before: server.properties was written unescaped in UTF-8, and Kafka (ISO-8859-1,
    backslash escapes) wrote its logs to ...josÃ©b-dÃ¤tÃ¤ ..., another directory."""
    from millpond.dev.kafka import LocalKafka
    from tests.kafka_util import create_topic

    _java_and_jars_or_unavailable()
    port = _free_port_pair()
    data = tmp_path / ODD
    broker = LocalKafka(data_dir=data, port=port, controller_port=port + 1)
    try:
        bootstrap = broker.start(timeout=120)
        assert broker.status().running
        create_topic(bootstrap, "odd-dir", 1)
        assert (data / "kraft-logs" / "meta.properties").is_file()
        deadline = time.monotonic() + 30  # the partition's log is made once it has a leader
        while not (data / "kraft-logs" / "odd-dir-0").is_dir() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (data / "kraft-logs" / "odd-dir-0").is_dir(), sorted(os.listdir(data / "kraft-logs"))
        assert os.listdir(tmp_path) == [ODD], "nothing written beside the data dir"
    finally:
        broker.stop()
    assert not broker.status().running


def test_s3proxy_stores_in_a_data_dir_with_odd_characters(tmp_path: Path) -> None:
    """The same for S3Proxy's jclouds.filesystem.basedir (read by Properties.load too)."""
    import s3fs

    from millpond.dev.errors import DevError
    from millpond.dev.kafka import free_port, require_java17
    from millpond.dev.s3 import LocalS3
    from tests.conftest import unavailable

    try:
        require_java17()
    except DevError as exc:
        unavailable(f"no JVM for S3Proxy: {exc}")
    data = tmp_path / ODD
    server = LocalS3(data, port=free_port())
    try:
        server.start(timeout=90)  # before: S3Proxy refused the mangled base dir and exited
        fs = s3fs.S3FileSystem(**server.storage_options(), skip_instance_cache=True)
        fs.call_s3("create_bucket", Bucket="odd")
        fs.pipe("odd/k.txt", b"hello")
        assert (data / "buckets" / "odd" / "k.txt").read_bytes() == b"hello"
        assert os.listdir(tmp_path) == [ODD]
    finally:
        server.stop()

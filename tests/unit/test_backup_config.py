"""The job.state.backup.* keys and stores.<s>.backup.enabled: defaults, nesting, errors
located at file:line."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from millpond.config import BackupConfig, Config, ConfigError

STORE = "stores.s.factory=rocksdb\nstores.s.key.serde=string\nstores.s.msg.serde=json\n"


def load(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "job.properties"
    path.write_text(text)
    return Config.load(path, env={})


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value)


def test_backups_are_off_without_a_uri(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=j\n" + STORE)
    assert config.backup is None
    assert config.stores["s"].backup_enabled


def test_defaults_and_nested_options(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # backup.enabled is a known store key
        config = load(tmp_path, "job.name=j\n" + STORE + "stores.s.backup.enabled=false\n"
                      "job.state.backup.uri = s3://bucket/prefix\n"
                      "job.state.backup.options.key=AK\n"
                      "job.state.backup.options.anon=False\n"
                      "job.state.backup.options.client_kwargs.endpoint_url=http://h:9000\n"
                      "job.state.backup.options.client_kwargs.region_name=eu-west-1\n")
    assert config.backup == BackupConfig(
        "s3://bucket/prefix", 60000, 3,
        {"key": "AK", "anon": False,
         "client_kwargs": {"endpoint_url": "http://h:9000", "region_name": "eu-west-1"}})
    assert not config.stores["s"].backup_enabled


def test_interval_and_retain(tmp_path: Path) -> None:
    config = load(tmp_path, "job.name=j\njob.state.backup.uri=file:///mnt/b\n"
                  "job.state.backup.interval.ms=0\njob.state.backup.retain=1\n")
    assert config.backup is not None
    assert (config.backup.interval_ms, config.backup.retain) == (0, 1)


@pytest.mark.parametrize(("text", "message"), [
    ("job.state.backup.uri=file:///b\n\njob.state.backup.retain=0\n",
     "job.properties:4: job.state.backup.retain: must be at least 1, got 0"),
    ("job.state.backup.uri=file:///b\njob.state.backup.interval.ms=soon\n",
     "job.properties:3: job.state.backup.interval.ms: expected an integer, got 'soon'"),
    ("job.state.backup.retain=2\n",
     "job.properties:2: job.state.backup.retain: has no effect without job.state.backup.uri"),
    ("job.state.backup.uri=bucket/prefix\n",
     "job.properties:2: job.state.backup.uri: expected a URL such as s3://bucket/prefix"),
    ("job.state.backup.uri=s3://b\njob.state.backup.options.a=1\n"
     "job.state.backup.options.a.b=2\n",
     "job.properties:4: job.state.backup.options.a.b: 'a' is already a plain option"),
    ("job.state.backup.uri=s3://b\njob.state.backup.options.a..b=1\n",
     "job.properties:3: job.state.backup.options.a..b: empty option name part"),
    (STORE + "job.state.backup.uri=s3://b\nstores.s.backup.enabled=no\n",
     "job.properties:6: stores.s.backup.enabled: expected true or false, got 'no'"),
])
def test_errors_name_file_line_and_key(tmp_path: Path, text: str, message: str) -> None:
    assert error_of(tmp_path, "job.name=j\n" + text).startswith(f"{tmp_path}/{message}")


def test_options_are_typed_and_merged_into_the_s3_defaults(tmp_path: Path) -> None:
    """A user's config_kwargs.* key is merged into the defaults, not put in their place
    (before: the 5 s connect timeout and the 2-attempt retry limit were dropped, and the
    user's '60' stayed a string)."""
    pytest.importorskip("s3fs")
    from millpond.backup.location import BackupLocation

    config = load(tmp_path, "job.name=j\njob.state.backup.uri=s3://bucket/prefix\n"
                  "job.state.backup.options.config_kwargs.read_timeout=60\n"
                  "job.state.backup.options.config_kwargs.retries.max_attempts=4\n"
                  "job.state.backup.options.key=0123\n"
                  "job.state.backup.options.default_block_size=5242880\n")
    assert config.backup is not None
    assert config.backup.options == {
        "config_kwargs": {"read_timeout": 60, "retries": {"max_attempts": 4}},
        "key": "0123", "default_block_size": 5242880}
    fs = BackupLocation.from_config(config).fs
    assert fs.config_kwargs == {"connect_timeout": 5, "read_timeout": 60,
                                "retries": {"max_attempts": 4, "mode": "standard"}}
    assert fs.key == "0123"

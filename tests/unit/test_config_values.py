"""One integer parser for every config value (millpond.config.values): Java's
Integer.parseInt rules, located errors, in the job's keys, the stores' RocksDB options and
the metrics reporter's port alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond.config import Config, ConfigError, load_properties
from millpond.config.values import check_range, get_int, parse_bool, parse_int
from millpond.metrics import MetricsConfigError, parse_reporters
from millpond.stores import RocksDbOptions
from millpond.stores.errors import StoreConfigError

STORE = "stores.s.factory=rocksdb\nstores.s.key.serde=string\nstores.s.msg.serde=json\n"
JOB = "job.name=demo\njob.coordinator.system=kafka\n"
NOT_INTEGERS = [("1_000", "no _ separators"), ("٣", "ASCII digits 0-9 only"),
                ("²", "ASCII digits 0-9 only"), ("1e3", "expected an integer"),
                ("", "expected an integer")]


@pytest.mark.parametrize(("text", "says"), NOT_INTEGERS)
def test_parse_int_takes_what_java_takes(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_int(text)


def test_parse_int_bool_and_range() -> None:
    assert parse_int(" -42 ") == -42 and parse_int("+7") == 7
    assert parse_bool(" TRUE ") is True and parse_bool("false") is False
    with pytest.raises(ValueError, match="expected true or false, got 'yes'"):
        parse_bool("yes")
    assert check_range(5, 0, 10) == 5
    with pytest.raises(ValueError, match="must be from 0 to 10, got 11"):
        check_range(11, 0, 10)
    with pytest.raises(ValueError, match="must be at most 3, got 4"):
        check_range(4, maximum=3)


@pytest.mark.parametrize(("text", "says"), NOT_INTEGERS[:3])
def test_job_int_key_error_names_file_and_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "job.properties"
    path.write_text(f"a=1\nx={text}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        get_int(load_properties(path), "x", 0)
    assert str(info.value).startswith(f"{path}:2: x: "), str(info.value)
    assert says in str(info.value)


def _store_options(tmp_path: Path, line: str) -> RocksDbOptions:
    path = tmp_path / "job.properties"
    path.write_text(JOB + STORE + line + "\n", encoding="utf-8")
    config = Config.load(path, (), env={})
    return RocksDbOptions.from_store_properties(config.stores["s"].properties)


@pytest.mark.parametrize(("text", "says"), NOT_INTEGERS[:3])
def test_rocksdb_option_is_an_integer_with_a_location(tmp_path: Path, text: str,
                                                      says: str) -> None:
    # Before: int() made 1_000 a block size of 1000 and ٣ one of 3; ² had no location.
    with pytest.raises(StoreConfigError) as info:
        _store_options(tmp_path, f"stores.s.rocksdb.block.size.bytes={text}")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'job.properties'}:6: stores.s.rocksdb.block.size.bytes: "
                              "expected an integer"), message
    assert says in message


def test_rocksdb_option_range_error_has_a_location(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match=r"job.properties:6: stores.s.rocksdb.num.write.buffers: "
                                               "must be at least 1, got 0"):
        _store_options(tmp_path, "stores.s.rocksdb.num.write.buffers=0")
    assert _store_options(tmp_path, "stores.s.rocksdb.block.size.bytes= 8192 ").block_size_bytes \
        == 8192


@pytest.mark.parametrize(("text", "says"), NOT_INTEGERS[:3])
def test_metrics_port_is_an_integer_with_a_location(tmp_path: Path, text: str,
                                                    says: str) -> None:
    # Before: ² was a bare ValueError traceback from int(); ٣ became port 3.
    path = tmp_path / "job.properties"
    path.write_text(f"metrics.reporters=prometheus\nmetrics.reporter.prometheus.port={text}\n",
                    encoding="utf-8")
    with pytest.raises(MetricsConfigError) as info:
        parse_reporters(load_properties(path))
    message = str(info.value)
    assert message.startswith(f"{path}:2: metrics.reporter.prometheus.port: "), message
    assert says in message


def test_parse_scalar_and_deep_merge() -> None:
    from millpond.config.values import deep_merge, parse_scalar

    assert [parse_scalar(t) for t in ("60", " -1 ", "2.5", "True", "1_000", "٣", "x")] == \
        [60, -1, 2.5, True, "1_000", "٣", "x"]
    defaults = {"a": {"b": 1, "c": {"d": 2}}, "e": 3}
    merged = deep_merge(defaults, {"a": {"c": {"f": 4}}, "e": {"g": 5}})
    assert merged == {"a": {"b": 1, "c": {"d": 2, "f": 4}}, "e": {"g": 5}}
    assert defaults == {"a": {"b": 1, "c": {"d": 2}}, "e": 3}, "the defaults are not changed"

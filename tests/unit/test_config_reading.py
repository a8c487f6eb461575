"""Config file edge cases: a UTF-8 byte-order mark, the $${NAME} escape, surrogate pairs
beside a lone surrogate."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond.config import Config, ConfigError, load_properties, parse_properties


def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    # Before: the first key was '\ufeffjob.name' and the job failed with 'job.name: is missing'.
    path = tmp_path / "job.properties"
    path.write_bytes(b"\xef\xbb\xbfjob.name=demo\njob.coordinator.system=kafka\n")
    assert list(load_properties(path))[0] == "job.name"
    assert Config.load(path, (), env={}).job.name == "demo"
    assert list(parse_properties("\ufeffa=1"))[0] == "a"


def test_double_dollar_escapes_a_placeholder(tmp_path: Path) -> None:
    # Before: $${X} failed with 'environment variable X is not set'.
    path = tmp_path / "job.properties"
    path.write_text("job.name=demo\njob.coordinator.system=kafka\n"
                    "my.template=$${X}/$${Y}:${HOME_DIR}\nmy.dollars=$$ and $ and $$x\n",
                    encoding="utf-8")
    config = Config.load(path, (), env={"HOME_DIR": "/h"})
    assert config.get("my.template") == "${X}/${Y}:/h"
    assert config.get("my.dollars") == "$$ and $ and $$x"
    with pytest.raises(ConfigError, match="environment variable X is not set"):
        Config.load(path, ("my.other=${X}",), env={"HOME_DIR": "/h"})


def test_matched_surrogate_pairs_join_beside_a_lone_one() -> None:
    # Before: the whole value was decoded as UTF-16 at once, so one lone \uD800 kept the
    # valid pair \uD83D\uDE00 beside it split in two surrogates.
    props = parse_properties("a=\\uD83D\\uDE00 \\uD800\nb=\\uD83D\\uDE00\nc=\\uDE00\\uD83D\n")
    assert props["a"] == "\U0001F600 \ud800"
    assert props["b"] == "\U0001F600"
    assert props["c"] == "\ude00\ud83d", "a low surrogate before a high one is no pair"


def test_invalid_utf8_error_says_how_millpond_reads(tmp_path: Path) -> None:
    path = tmp_path / "job.properties"
    path.write_bytes(b"job.name=jos\xe9\n")  # ISO-8859-1, as Samza would read it
    with pytest.raises(ConfigError, match=r"not valid UTF-8.*\\uXXXX"):
        load_properties(path)

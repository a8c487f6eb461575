"""The Java .properties parser: syntax rules, escapes, continuations and locations."""

from __future__ import annotations

from pathlib import Path

import pytest

from millpond.config import ConfigError, Properties, load_properties, parse_properties


def parse(text: str) -> dict[str, str]:
    return dict(parse_properties(text))


@pytest.mark.parametrize(
    "line",
    ["key=value", "key = value", "key:value", "key : value", "key value", "key\tvalue",
     "   key=value", "\t\fkey = value", "key \t= value", "key    value"],
)
def test_separators_and_leading_whitespace(line: str) -> None:
    assert parse(line) == {"key": "value"}


def test_only_the_first_separator_splits() -> None:
    assert parse("a=b=c\nd:e:f\ng h i\nj = :k") == {
        "a": "b=c", "d": "e:f", "g": "h i", "j": ":k"}


def test_whitespace_then_separator_counts_once() -> None:
    assert parse("key  =  = v") == {"key": "= v"}


def test_trailing_whitespace_is_kept_in_values() -> None:
    assert parse("key = value  \t") == {"key": "value  \t"}


def test_key_without_value() -> None:
    assert parse("alone\nempty=\nspaced   \n") == {"alone": "", "empty": "", "spaced": ""}


def test_comments_and_blank_lines() -> None:
    text = "# hash comment\n! bang comment\n   # indented comment\n\n   \t\nkey=v # not a comment\n"
    assert parse(text) == {"key": "v # not a comment"}


def test_comment_line_is_never_continued() -> None:
    assert parse("# comment \\\nkey=v") == {"key": "v"}


def test_line_continuation_strips_leading_whitespace() -> None:
    text = "fruits = apple, banana, \\\n         pear, \\\n\t\tcherry\nnext=1"
    assert parse(text) == {"fruits": "apple, banana, pear, cherry", "next": "1"}


def test_continuation_line_may_look_like_a_comment() -> None:
    assert parse("key = a\\\n  # b") == {"key": "a# b"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key = a\\\\\nnext=1", {"key": "a\\", "next": "1"}),  # even: an escaped backslash
        ("key = a\\\\\\\nb", {"key": "a\\b"}),  # odd: escaped backslash + continuation
        ("key = a\\\n\nnext=1", {"key": "a", "next": "1"}),  # empty continuation ends it
        ("key = a\\", {"key": "a"}),  # continuation at end of input is dropped
    ],
)
def test_backslash_counting_at_line_end(text: str, expected: dict[str, str]) -> None:
    assert parse(text) == expected


def test_continued_key() -> None:
    assert parse("long\\\n  key = v") == {"longkey": "v"}


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_all_newline_styles(newline: str) -> None:
    text = newline.join(["a=1", "b=2\\", "  3", "c=4"])
    assert parse(text) == {"a": "1", "b": "23", "c": "4"}


def test_escapes_in_values() -> None:
    props = parse(r"v = tab\tnl\ncr\rff\fbs\\eq\=co\:ha\#ba\!sp\ x\qz")
    assert props == {"v": "tab\tnl\ncr\rff\fbs\\eq=co:ha#ba!sp xqz"}


def test_escaped_leading_space_in_value() -> None:
    assert parse(r"key = \  padded") == {"key": "  padded"}


def test_escaped_separators_in_keys() -> None:
    text = r"a\=b=1" + "\n" + r"c\:d:2" + "\n" + r"e\ f g" + "\n" + r"\#h=3" + "\n" + r"\!i=4"
    assert parse(text) == {"a=b": "1", "c:d": "2", "e f": "g", "#h": "3", "!i": "4"}


def test_unicode_escapes() -> None:
    props = parse(r"k\u00e9y = caf\u00E9 \u20AC" + "\n" + r"emoji = \uD83D\uDE00")
    assert props == {"kéy": "café €", "emoji": "\U0001f600"}


def test_non_ascii_text_passes_through() -> None:
    assert parse("grüße = naïve ☃") == {"grüße": "naïve ☃"}


@pytest.mark.parametrize("bad", [r"\u12", r"\u12G4", r"\u", r"\u+123", r"\u1_23"])
def test_malformed_unicode_escape_is_located(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_properties(f"a=1\n# note\nkey = x{bad}\n", source="job.properties")
    assert (info.value.file, info.value.line, info.value.key) == ("job.properties", 3, "key")
    assert str(info.value).startswith("job.properties:3: key: malformed \\uXXXX escape")


def test_malformed_unicode_escape_in_key() -> None:
    with pytest.raises(ConfigError, match=r"^f:2: malformed"):
        parse_properties("a=1\nk\\uZZZZ=v", source="f")


def test_line_numbers_point_at_the_start_of_a_logical_line() -> None:
    props = parse_properties("# c\n\na=1\nb = x\\\n  y\\\n  z\nc=3\n", source="f.properties")
    assert props.location("a") == ("f.properties", 3)
    assert props.location("b") == ("f.properties", 4)
    assert props.location("c") == ("f.properties", 7)
    assert props.location("missing") is None


def test_later_duplicate_wins_with_its_location() -> None:
    props = parse_properties("k=first\nother=x\nk=second\n")
    assert props["k"] == "second"
    assert props.location("k") == ("<string>", 3)
    assert len(props) == 2


def test_properties_is_a_mapping() -> None:
    props = parse_properties("a=1\nb=2")
    assert isinstance(props, Properties)
    assert list(props) == ["a", "b"] and "a" in props and props.get("z", "d") == "d"


def test_load_properties_reads_utf8_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "job.properties"
    path.write_text("name = café\n", encoding="utf-8")
    props = load_properties(path)
    assert props["name"] == "café"
    assert props.location("name") == (str(path), 1)


def test_load_properties_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_properties(tmp_path / "nope.properties")

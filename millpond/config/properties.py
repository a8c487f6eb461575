"""A Java ``.properties`` parser that remembers where every key came from.

Follows ``java.util.Properties.load``: ``#``/``!`` comment lines, ``=``/``:``/whitespace
separators, backslash line continuations, ``\\uXXXX`` and single-character escapes in keys and
values, later duplicates win. Each key keeps the file and line where its logical line starts,
so configuration errors can point at the exact spot.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from millpond.config.errors import ConfigError

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_NEWLINE = re.compile(r"\r\n|\r|\n")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_BOM = "\ufeff"


class Properties(Mapping[str, str]):
    """String keys and values plus, for each key, the ``(file, line)`` it was set at.

    Line 0 means the value did not come from a file line (e.g. a command-line override).
    ``source`` names the file (or text) the properties were read from: errors about a key
    that is missing altogether point at it. ``prefix`` is what was cut from every key when
    these are a part of a larger set (``stores.<name>.``; see
    :func:`millpond.config.values.sub_properties`), so errors can name the full key.
    """

    def __init__(self, source: str | None = None, prefix: str = "") -> None:
        self._values: dict[str, str] = {}
        self._locations: dict[str, tuple[str, int]] = {}
        # (key, where it was first set, where it was set again) for each key a file sets twice
        self.duplicates: list[tuple[str, tuple[str, int], tuple[str, int]]] = []
        self.source = source
        self.prefix = prefix

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Properties({self._values!r})"

    def set(self, key: str, value: str, file: str, line: int = 0) -> None:
        """Set ``key`` (replacing any earlier value and location)."""
        self._values[key] = value
        self._locations[key] = (file, line)

    def location(self, key: str) -> tuple[str, int] | None:
        """``(file, line)`` where ``key`` was set, or None if it is not set."""
        return self._locations.get(key)

    def copy(self) -> Properties:
        new = Properties(self.source, self.prefix)
        new._values = dict(self._values)
        new._locations = dict(self._locations)
        new.duplicates = list(self.duplicates)
        return new


def load_properties(path: str | Path) -> Properties:
    """Parse the ``.properties`` file at ``path``, read as UTF-8 (a leading byte-order mark is
    dropped).

    This differs from Samza: its ``PropertiesConfigLoader`` reads the file with
    ``Properties.load(InputStream)``, as ISO-8859-1. A file in ASCII, with any other
    character written as ``\\uXXXX``, means the same to both; a non-ASCII character written
    as itself is read right by millpond and as two or three Latin-1 characters by Samza (and
    Latin-1 bytes that are not valid UTF-8 are an error here)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file: {e.strerror or e}", file=str(path)) from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"not valid UTF-8: {e} (millpond reads config files as UTF-8; "
                          "write other characters as \\uXXXX escapes)", file=str(path)) from e
    return parse_properties(text, source=str(path))


def parse_properties(text: str, source: str = "<string>") -> Properties:
    """Parse ``.properties`` text; ``source`` names it in locations and errors. A leading
    byte-order mark (U+FEFF, as some editors write) is not part of the first key."""
    text = text.removeprefix(_BOM)
    props = Properties(source)
    for line_no, line in _logical_lines(text):
        raw_key, raw_value = _split(line)
        key = _unescape(raw_key, source, line_no)
        earlier = props.location(key)
        if earlier is not None:  # the later value wins, as in Java; the loader warns
            props.duplicates.append((key, earlier, (source, line_no)))
        props.set(key, _unescape(raw_value, source, line_no, key), source, line_no)
    return props


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield ``(start line number, logical line)`` with comments, blanks, continuations done."""
    lines = _NEWLINE.split(text)
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue  # a comment line is never continued, even if it ends in a backslash
        while _continues(line):
            line = line[:-1]
            if i == len(lines):
                break  # a continuation at end of input is dropped, as Java does
            line += lines[i].lstrip(_WHITESPACE)
            i += 1
        yield start, line


def _continues(line: str) -> bool:
    """True if the line ends in an odd number of backslashes."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """Split at the first unescaped ``=``, ``:`` or whitespace (whitespace may surround it)."""
    i = 0
    while i < len(line) and line[i] not in _SEPARATORS + _WHITESPACE:
        i += 2 if line[i] == "\\" else 1
    i = min(i, len(line))
    key, rest = line[:i], line[i:].lstrip(_WHITESPACE)
    if rest[:1] and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(text: str, source: str, line: int, key: str | None = None) -> str:
    """Resolve backslash escapes; ``\\uXXXX`` surrogate pairs combine as in Java strings."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\":
            out.append(char)
        elif text[i : i + 1] == "u":
            digits = text[i + 1 : i + 5]
            if not _HEX4.fullmatch(digits):
                raise ConfigError(
                    f"malformed \\uXXXX escape: \\u{digits} (expected 4 hex digits)",
                    key=key, file=source, line=line,
                )
            out.append(chr(int(digits, 16)))
            i += 5
        else:
            out.append(_ESCAPES.get(text[i : i + 1], text[i : i + 1]))
            i += 1
    return _join_surrogates(out)


def _join_surrogates(chars: list[str]) -> str:
    """Each high surrogate directly followed by a low one becomes the character the pair
    encodes (as a Java string would hold it); a lone surrogate stays as written, and does not
    keep the pairs around it from joining."""
    out: list[str] = []
    i = 0
    while i < len(chars):
        char = chars[i]
        following = chars[i + 1] if i + 1 < len(chars) else ""
        if "\ud800" <= char <= "\udbff" and following and "\udc00" <= following <= "\udfff":
            out.append(chr(0x10000 + ((ord(char) - 0xD800) << 10) + (ord(following) - 0xDC00)))
            i += 2
        else:
            out.append(char)
            i += 1
    return "".join(out)

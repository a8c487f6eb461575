"""Writing the ``.properties`` files the dev servers' JVMs read.

Kafka (``Utils.loadProps``) and S3Proxy read their configuration with
``java.util.Properties.load(InputStream)``: ISO-8859-1, with backslash escapes. A value
written as it is, in the locale's encoding, comes back changed: a data dir ``.../josé-data``
(UTF-8 bytes read as Latin-1) as ``.../josÃ©-data``, and ``...\\b-data`` as ``...b-data``
(the backslash taken for an escape). javaproperties escapes what ``load`` would unescape
and writes every other character as ``\\uXXXX``, so the file is ASCII and reads back exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import javaproperties

from millpond.files import write_atomically

# What java.util.Properties.load(InputStream) decodes the file as.
ENCODING = "iso-8859-1"


def dumps(props: Mapping[str, str]) -> str:
    """``props`` as ``.properties`` text that ``Properties.load`` reads back exactly (no
    timestamp comment; in the order given)."""
    return javaproperties.dumps(props, timestamp=False, sort_keys=False, ensure_ascii=True)


def write(path: Path, props: Mapping[str, str], mode: int | None = None) -> None:
    """Replace ``path`` with ``props`` (:func:`dumps`) in :data:`ENCODING`, atomically, with
    exactly ``mode`` when given (0600 for a file that holds passwords)."""
    write_atomically(path, dumps(props), mode, encoding=ENCODING)

"""Key patterns such as ``stores.<store>.rocksdb.*`` as regular expressions.

A ``<name>`` stands for one dotted part, unless it is one of ``wide`` (names that may hold
dots, such as ``<topic>``); a ``*`` stands for anything. Used by the key schema and by the
table of Samza's keys.
"""

from __future__ import annotations

import re
from functools import cache


@cache
def key_regex(pattern: str, wide: tuple[str, ...] = ()) -> re.Pattern[str]:
    """The regular expression a key matching ``pattern`` fully matches."""
    out = []
    for part in re.split(r"(<[^>]+>|\*)", pattern):
        if part == "*" or part in wide:
            out.append(".+")
        elif part.startswith("<"):
            out.append("[^.]+")
        else:
            out.append(re.escape(part))
    return re.compile("".join(out))

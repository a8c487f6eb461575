"""The tests' timeout policy: pytest-timeout's global limit is a backstop for a hung test and
never cuts a bound a test sets on its own waits (a 300 s global limit once cut tests' 600 s
bounds short without a word)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
BOUND = re.compile(r"\btimeout=([0-9_]+(?:\.[0-9]+)?)\b")


def test_the_global_limit_is_above_every_bound_a_test_sets() -> None:
    pyproject = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    limit = float(pyproject["tool"]["pytest"]["ini_options"]["timeout"])
    bounds = []
    for path in TESTS.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "mark.timeout" in line:
                continue
            bounds += [(float(v.replace("_", "")), f"{path.relative_to(TESTS)}:{n}")
                       for v in BOUND.findall(line)]
    assert bounds, "no test bounds found: the pattern no longer matches the tests' waits"
    over = [(v, where) for v, where in bounds if v >= limit]
    assert not over, f"bounds at or above pytest's global timeout {limit:.0f} s: {over}"

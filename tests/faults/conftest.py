"""Faults suite support: --faults-full sizes, and a summary table of what survived."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROWS: list[dict[str, Any]] = []
SUMMARY = Path(__file__).resolve().parents[2] / "benchmarks" / "out" / "faults-summary.md"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (not skip) the tests marked ``faults_full`` unless --faults-full is given."""
    if config.getoption("--faults-full"):
        return
    keep = [i for i in items if i.get_closest_marker("faults_full") is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


@pytest.fixture
def full(request: pytest.FixtureRequest) -> bool:
    """True under `make faults` (--faults-full): the long versions of the suite."""
    return bool(request.config.getoption("--faults-full"))


@pytest.fixture
def report() -> Callable[..., None]:
    """Record one row of the summary: fault, what was tried, lost and duplicated updates."""

    def add(fault: str, tried: str, lost: int, duplicated: int, outcome: str) -> None:
        ROWS.append({"fault": fault, "tried": tried, "lost": lost, "duplicated": duplicated,
                     "outcome": outcome})

    return add


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not ROWS:
        return
    lines = ["| fault | what was tried | lost updates | duplicated updates | outcome |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['fault']} | {r['tried']} | {r['lost']} | {r['duplicated']} | {r['outcome']} |"
              for r in ROWS]
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text("\n".join(lines) + "\n")
    terminalreporter.write_sep("=", "faults summary")
    for line in lines:
        terminalreporter.write_line(line)

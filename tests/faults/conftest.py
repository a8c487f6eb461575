"""Faults suite support: --faults-full sizes, and the report of what survived.

Each test's ``report(...)`` row goes into one JSON report per run (``MILLPOND_FAULTS_REPORT``,
default ``benchmarks/out/faults-report.json``: the suite, commit, date, load and CPU steal,
and each row with its test id); ``benchmarks/faults_table.py`` renders the reliability
table of the docs from the committed reports, never from hand-typed figures.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common import cpu_ticks, steal_percent

REPO = Path(__file__).resolve().parents[2]
ROWS: list[dict[str, Any]] = []
SUMMARY = REPO / "benchmarks" / "out" / "faults-summary.md"
STARTED: dict[str, Any] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    STARTED.update(time=time.time(), ticks=cpu_ticks())


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
def report(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record one row of the report: fault, what was tried, lost and duplicated updates."""

    def add(fault: str, tried: str, lost: int, duplicated: int, outcome: str) -> None:
        ROWS.append({"test": request.node.nodeid, "fault": fault, "tried": tried,
                     "lost": lost, "duplicated": duplicated, "outcome": outcome})

    return add


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=REPO,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not ROWS:
        return
    import json

    full = bool(terminalreporter.config.getoption("--faults-full"))
    failed = len(terminalreporter.stats.get("failed", []))
    run = {"suite": "make faults" if full else os.environ.get("MILLPOND_FAULTS_SUITE",
                                                               "make test-faults"),
           "commit": _commit(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
           "minutes": round((time.time() - STARTED.get("time", time.time())) / 60, 1),
           "load": round(os.getloadavg()[0], 1),
           "steal_percent": steal_percent(STARTED["ticks"], cpu_ticks())
           if "ticks" in STARTED else None,
           "ci": os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"),
           "failed": failed, "rows": ROWS}
    path = Path(os.environ.get("MILLPOND_FAULTS_REPORT")
                or REPO / "benchmarks" / "out" / "faults-report.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=1) + "\n")
    lines = ["| fault | what was tried | lost updates | duplicated updates | outcome |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['fault']} | {r['tried']} | {r['lost']} | {r['duplicated']} | {r['outcome']} |"
              for r in ROWS]
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text("\n".join(lines) + "\n")
    terminalreporter.write_sep("=", "faults summary")
    for line in lines:
        terminalreporter.write_line(line)

"""The reliability table of the docs is the fault suite's committed reports, rendered: the
check fails when the page and the reports differ, and a report of a failed run is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import faults_table


def test_the_committed_table_matches_the_committed_reports() -> None:
    assert faults_table.main(["--check"]) == 0


def report(**extra: object) -> dict[str, object]:
    return {"suite": "make test-faults", "commit": "abc1234", "date": "2026-11-26",
            "minutes": 16.5, "load": 2.3, "steal_percent": 0.4, "ci": True, "failed": 0,
            "rows": [{"test": "tests/faults/test_crashes.py::test_x", "fault": "SIGKILL x4",
                      "tried": "60,000 msgs | 4 kills", "lost": 0, "duplicated": 1200,
                      "outcome": "exact"}], **extra}


def test_render_and_a_changed_figure(tmp_path: Path) -> None:
    (tmp_path / "short.json").write_text(json.dumps(report()))
    table = faults_table.render(faults_table.load_reports(tmp_path))
    assert "| SIGKILL x4 | 60,000 msgs \\| 4 kills | 0 | 1,200 | exact |" in table
    assert table.startswith("From `make test-faults` at commit `abc1234`, 2026-11-26 (CI)")
    page = f"# R\n\n{faults_table.BEGIN}\nold\n{faults_table.END}\n"
    assert faults_table.page_with(page, table) != page
    assert faults_table.page_with(faults_table.page_with(page, table), table) == \
        faults_table.page_with(page, table)


def test_a_failed_run_is_not_evidence(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps(report(failed=2)))
    with pytest.raises(SystemExit, match="2 failed test"):
        faults_table.load_reports(tmp_path)

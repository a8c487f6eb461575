"""The reliability table of ``docs/reliability.md``, rendered from the fault suite's reports.

Each run of the fault suite writes one JSON report (``tests/faults/conftest.py``: the suite,
commit, date, load, CPU steal and, per test, the fault, what was tried, lost and duplicated
updates and the outcome). The reports committed in ``benchmarks/faults/`` are the evidence;
this script renders them between the page's ``<!-- faults-table -->`` markers, and
``--check`` (run by ``tests/unit/test_faults_table.py`` in ``make test``) fails when the
committed page does not match them: no figure of the table is typed by hand.

    python -m benchmarks.faults_table            # rewrite the table in the page
    python -m benchmarks.faults_table --check    # exit 1 if it differs
    python -m benchmarks.faults_table --add benchmarks/out/faults-report.json NAME
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "benchmarks" / "faults"
PAGE = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- faults-table -->", "<!-- /faults-table -->"
ORDER = ("make faults", "make test-faults", "make test-dataflow-faults")


def load_reports(directory: Path = REPORTS) -> list[dict[str, Any]]:
    """The committed reports, the long suite first; a report of a failed run is refused."""
    reports = []
    for path in sorted(directory.glob("*.json")):
        report = json.loads(path.read_text())
        if report.get("failed"):
            raise SystemExit(f"{path}: a run with {report['failed']} failed test(s) is not "
                             "evidence; commit the report of a passing run")
        report["file"] = path.name
        reports.append(report)
    rank = {suite: i for i, suite in enumerate(ORDER)}
    return sorted(reports, key=lambda r: (rank.get(r["suite"], len(ORDER)), r["file"]))


def _cell(value: Any) -> str:
    text = f"{value:,}" if isinstance(value, int) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render(reports: list[dict[str, Any]]) -> str:
    """The Markdown between the markers: per report, a line saying where its rows come from,
    then its rows."""
    if not reports:
        return ("No report committed yet: after a passing `make test-faults`, run `python -m "
                "benchmarks.faults_table --add benchmarks/out/faults-test-faults.json "
                "test-faults`.")
    out: list[str] = []
    for r in reports:
        steal = r.get("steal_percent")
        out.append(
            f"From `{r['suite']}` at commit `{r['commit']}`, {r['date']}"
            f"{' (CI)' if r.get('ci') else ''}: {len(r['rows'])} rows, {r['minutes']} min, "
            f"load {r['load']}" + (f", CPU steal {steal:.1f}%" if steal is not None else "")
            + f" (`benchmarks/faults/{r['file']}`).")
        out.append("")
        out.append("| fault | what was tried | lost updates | duplicated updates | outcome |")
        out.append("|---|---|---|---|---|")
        for row in r["rows"]:
            out.append("| " + " | ".join(_cell(row[k]) for k in (
                "fault", "tried", "lost", "duplicated", "outcome")) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def page_with(page: str, table: str) -> str:
    """``page`` with the text between the markers replaced by ``table``."""
    start, end = page.index(BEGIN) + len(BEGIN), page.index(END)
    return page[:start] + "\n" + table + "\n" + page[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the page's table differs from the reports")
    parser.add_argument("--add", nargs=2, metavar=("REPORT", "NAME"),
                        help="copy a run's report into benchmarks/faults/NAME.json first")
    args = parser.parse_args(argv)
    if args.add:
        shutil.copyfile(args.add[0], REPORTS / f"{args.add[1]}.json")
    page = PAGE.read_text()
    wanted = page_with(page, render(load_reports()))
    if args.check:
        if wanted != page:
            print(f"{PAGE.relative_to(REPO)}: the reliability table differs from the reports "
                  "in benchmarks/faults/; run `python -m benchmarks.faults_table`",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())

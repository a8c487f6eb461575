"""The handover workload's figures without Kafka: which tasks moved (from the second
process's log), the worst latency per side and phase, and its lines in results.md."""

from __future__ import annotations

from benchmarks import report
from benchmarks.workloads.handover import moved_partitions, phase_figures


def test_the_moved_tasks_are_the_second_processs_first_assignment() -> None:
    log = ("... INFO millpond.container: assigned partitions []\n"
           "... INFO millpond.container: assigned partitions [3, 1]\n"
           "... INFO millpond.container: assigned partitions [0]\n")
    assert moved_partitions(log) == [1, 3]
    assert moved_partitions("no assignment") == []


def test_phase_figures_take_each_seqs_first_sighting_inside_the_window() -> None:
    partition_of = {0: 0, 1: 1, 2: 0, 3: 1, 4: 0}
    records = [(0, 1000.0, 1010.0),   # before the window
               (1, 2000.0, 2500.0),   # moved, 500 ms
               (2, 2100.0, 2130.0),   # stayed, 30 ms
               (2, 2100.0, 2900.0),   # a second sighting: not counted
               (3, 2200.0, 2210.0),   # moved, 10 ms
               (4, 9000.0, 9999.0)]   # after the window
    got = phase_figures(records, partition_of, [1], 2000.0, 1000.0)
    assert got == {"stayed_max_ms": 30.0, "moved_max_ms": 500.0,
                   "stayed_messages": 1, "moved_messages": 2}


def test_the_handover_lines_in_results_md() -> None:
    res = {"ok": True, "rate": 5000, "window_s": 6.0, "moved": [0, 1], "produced": 130_000,
           "missing": 0, "steady": {"p50": 10.5, "p99": 88.5},
           "out": {"stayed_max_ms": 152.0, "moved_max_ms": 3786.0},
           "back": {"stayed_max_ms": 726.0, "moved_max_ms": 3675.0}}
    text = "\n".join(report.handover_table({"handover": res}))
    assert "| scale-out (1 -> 2 processes) | 152 | 3786 |" in text
    assert "| scale-in (2 -> 1, SIGTERM) | 726 | 3675 |" in text
    assert "steady p50 10.5 ms, p99 88.5 ms" in text
    assert "steady, one process" not in text  # results of before the baseline row
    res["steady"]["max"], res["steady_window_s"] = 97.4, 4.0
    text = "\n".join(report.handover_table({"handover": res}))
    assert "| steady, one process, no rebalance (4 s before the scale-out) | 97 | |" in text
    failed = report.handover_table({"handover": {"ok": False, "error": "moved []"}})
    assert "**FAILED** (moved [])" in failed[0]
    assert report.handover_table({}) == []

"""Commit turns: each task commits once per interval, the tasks' commits spread over it on a
light load (one task's pause at a time), together under load (their transactions commit side
by side)."""

from __future__ import annotations

import pytest

from millpond.tasks.turns import TURN_GAP_S, CommitTurns

TASKS = {p: f"task-{p}" for p in range(4)}


def commits(turns: CommitTurns, until: float, step: float = 0.01,
            loaded: bool = False) -> list[tuple[float, list[str]]]:
    """Run a loop clock from 0 to ``until``: each (time, tasks) committed."""
    out = []
    for i in range(round(until / step) + 1):
        now = i * step
        due = turns.due(TASKS, now, loaded)
        if due:
            out.append((round(now, 2), due))
            turns.committed([int(t.split("-")[1]) for t in due], now, spread=not loaded)
    return out


def test_on_a_light_load_each_task_commits_once_an_interval_in_a_turn_of_its_own() -> None:
    done = commits(CommitTurns(1.0), 3.0)
    assert all(len(tasks) == 1 for _, tasks in done)  # one task's pause at a time
    for name in TASKS.values():
        times = [at for at, tasks in done if name in tasks]
        assert len(times) == 3 and all(abs(b - a - 1.0) < 0.02
                                       for a, b in zip(times, times[1:], strict=False))
    starts = sorted(at for at, _ in done)[:4]
    assert starts == [0.25, 0.5, 0.75, 1.0]  # spread evenly over the interval


def test_under_load_every_task_commits_when_one_is_due_then_spreads_again_when_light() -> None:
    turns = CommitTurns(1.0)
    loaded = commits(turns, 2.2, loaded=True)
    assert [len(tasks) for _, tasks in loaded] == [4, 4]  # together, once an interval
    assert [at for at, _ in loaded] == [0.25, 1.25]
    light = [(at, tasks) for at, tasks in commits(turns, 4.0) if at > 2.2]
    assert len(light[0][1]) == 4  # due together at 2.25: committed together this once
    assert all(len(tasks) == 1 for _, tasks in light[1:])


def test_a_task_that_leaves_loses_its_turn_and_one_that_arrives_gets_one() -> None:
    turns = CommitTurns(1.0)
    assert turns.due({0: "a"}, 0.0) == []
    assert turns.due({0: "a"}, 1.0) == ["a"]
    turns.committed([0], 1.0, spread=True)
    assert turns.since(0, 1.5) == 0.5
    assert turns.due({1: "b"}, 1.6) == []  # 0 left; 1 is new: due within the interval
    assert turns.since(0, 1.6) == 0.0
    assert turns.due({1: "b"}, 2.6) == ["b"]


def test_a_late_turn_keeps_its_slot_unless_a_whole_interval_late() -> None:
    turns = CommitTurns(1.0)
    turns.due({0: "a"}, 0.0)
    turns.committed([0], 1.05, spread=False)  # due at 1.0, done at 1.05: next at 2.0
    assert turns.due({0: "a"}, 1.99) == [] and turns.due({0: "a"}, 2.0) == ["a"]
    turns.committed([0], 3.5, spread=False)  # over an interval late: one after this one
    assert turns.due({0: "a"}, 4.4) == [] and turns.due({0: "a"}, 4.5) == ["a"]


def test_no_interval_commits_every_task_every_time() -> None:
    assert CommitTurns(0.0).due({1: "b", 0: "a"}, 5.0) == ["a", "b"]


def test_turns_are_at_least_a_gap_apart_so_short_intervals_share_them() -> None:
    assert TURN_GAP_S == 0.1
    together = commits(CommitTurns(0.1), 0.35)  # exactly-once's default: one turn
    assert [len(tasks) for _, tasks in together] == [4, 4, 4]
    pairs = commits(CommitTurns(0.2), 0.45)  # two turns of two tasks
    assert [tasks for _, tasks in pairs][:2] == [["task-0", "task-1"], ["task-2", "task-3"]]
    assert [at for at, _ in pairs] == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=0.011)


def test_tasks_that_open_apart_still_take_turns_of_their_own() -> None:
    turns = CommitTurns(1.0)
    assert turns.due({0: "a", 1: "b"}, 0.0) == []
    assert turns.due({0: "a", 1: "b", 2: "c", 3: "d"}, 0.05) == []  # two more opened
    seen = []
    for i in range(5, 300):
        now = i / 100
        due = turns.due({0: "a", 1: "b", 2: "c", 3: "d"}, now)
        if due:
            seen.append(due)
            turns.committed([ord(t) - ord("a") for t in due], now, spread=True)
    assert all(len(d) == 1 for d in seen) and len(seen) >= 10, seen


def test_a_late_turn_under_load_keeps_every_task_together_until_a_light_load() -> None:
    turns = CommitTurns(1.0)
    turns.due(TASKS, 0.0)  # turns at 0.25, 0.5, 0.75, 1.0
    assert turns.due(TASKS, 0.30, loaded=True) == list(TASKS.values())  # task 0 was late
    turns.committed(TASKS, 0.30, spread=False)
    assert turns.due(TASKS, 1.29) == [] and len(turns.due(TASKS, 1.30)) == 4
    turns.committed(TASKS, 1.30, spread=True)  # light now: turns of their own again
    sizes = []
    for t in (1.55, 1.80, 2.05, 2.30):
        due = turns.due(TASKS, t)
        sizes.append(len(due))
        turns.committed([int(d.split("-")[1]) for d in due], t, spread=True)
    assert sizes == [1, 1, 1, 1]

"""Tasks commit in turns while the loop keeps up, all together under load."""

from __future__ import annotations

from millpond.tasks.turns import CommitTurns


def test_none_is_due_within_the_interval() -> None:
    turns = CommitTurns(every_s=1.0)
    turns.track([0, 1, 2, 3], now=0.0)
    assert turns.due(0.99, loaded=False) == []
    assert turns.due(0.99, loaded=True) == []


def test_keeping_up_the_due_tasks_commit_a_turn_at_a_time_at_least_a_gap_apart() -> None:
    turns = CommitTurns(every_s=1.0, gap_s=0.1)
    turns.track([0, 1, 2, 3], now=0.0)  # all arrived together: all due together
    assert turns.due(1.0, loaded=False) == [0]  # one task a turn (10 turns fit in 1 s)
    turns.committed([0], 1.0)
    assert turns.due(1.05, loaded=False) == []  # the gap
    assert turns.due(1.11, loaded=False) == [1]
    turns.committed([1], 1.11)
    for p, at in ((2, 1.22), (3, 1.33)):
        assert turns.due(at, loaded=False) == [p]
        turns.committed([p], at)
    # staggered from then on: each commits its own interval after its last commit
    assert turns.due(1.99, loaded=False) == []
    assert turns.due(2.0, loaded=False) == [0]
    turns.committed([0], 2.0)
    assert turns.due(2.05, loaded=False) == []
    assert turns.due(2.12, loaded=False) == [1]


def test_under_load_every_task_commits_when_the_first_is_due() -> None:
    turns = CommitTurns(every_s=1.0, gap_s=0.1)
    turns.track([0, 1, 2, 3], now=0.0)
    turns.committed([0], 0.5)  # staggered
    assert turns.due(1.0, loaded=True) == [0, 1, 2, 3]
    turns.committed([0, 1, 2, 3], 1.0)
    assert turns.due(1.5, loaded=True) == []


def test_a_short_interval_shares_turns() -> None:
    """At task.commit.ms=100 there is room for one turn: every task commits in it."""
    turns = CommitTurns(every_s=0.1, gap_s=0.1)
    turns.track([0, 1, 2, 3], now=0.0)
    assert turns.due(0.1, loaded=False) == [0, 1, 2, 3]
    turns = CommitTurns(every_s=0.25, gap_s=0.1)  # two turns: two tasks each
    turns.track([0, 1, 2, 3], now=0.0)
    assert turns.due(0.25, loaded=False) == [0, 1]


def test_more_tasks_than_turns_commit_the_most_overdue_first() -> None:
    turns = CommitTurns(every_s=0.3, gap_s=0.1)  # three turns for six tasks: two a turn
    turns.track([0, 1, 2, 3, 4, 5], now=0.0)
    turns.committed([0, 1, 2], 0.05)
    assert turns.due(0.36, loaded=False) == [3, 4]  # 0..2 are due too, later
    turns.committed([3, 4], 0.36)
    assert turns.due(0.47, loaded=False) == [0, 5]


def test_tasks_come_and_go() -> None:
    turns = CommitTurns(every_s=1.0, gap_s=0.1)
    turns.track([0, 1], now=0.0)
    turns.track([0, 1, 2], now=0.5)  # a new task counts from the last turn (the start)
    assert turns.since(2, 0.75) == 0.75 and turns.since(0, 0.75) == 0.75
    assert turns.due(1.0, loaded=True) == [0, 1, 2]  # under load: with the others
    turns.track([1, 2], now=1.0)  # task 0 moved away
    assert turns.since(0, 1.0) == 0.0
    assert turns.due(1.0, loaded=False) == [1]
    turns.committed([0], 1.0)  # a task not tracked: ignored
    assert turns.since(0, 1.0) == 0.0


def test_commit_every_poll_commits_every_task() -> None:
    turns = CommitTurns(every_s=0.0)
    turns.track([0, 1], now=0.0)
    assert turns.due(0.0, loaded=False) == [0, 1]


def test_a_task_asking_for_commits_holds_back_no_other_turn() -> None:
    """Task 0 commits every 50 ms on its own (coordinator.commit()); task 1's turn comes."""
    turns = CommitTurns(every_s=1.0, gap_s=0.1)
    turns.track([0, 1], now=0.0)
    t = 0.0
    while t < 1.0:
        t += 0.05
        turns.committed([0], t, turn=False)
    assert turns.due(1.0, loaded=False) == [1]


def test_a_task_that_arrives_joins_the_current_interval() -> None:
    """Its first commit comes with the next turns, not a whole interval after its opening."""
    turns = CommitTurns(every_s=1.0, gap_s=0.1, start=10.0)
    turns.track([0], now=10.6)  # opened 0.6 s into the loop's first interval
    assert turns.due(11.0, loaded=False) == [0]
    turns.committed([0], 11.0)
    turns.track([0, 1], now=11.4)  # arrives after task 0's turn at 11.0
    assert turns.since(1, 11.4) == turns.since(0, 11.4)
    assert turns.due(12.0, loaded=False) == [0]  # most overdue first, then a gap
    turns.committed([0], 12.0)
    assert turns.due(12.11, loaded=False) == [1]


def test_due_tasks_commit_pipelined_while_the_loop_keeps_up() -> None:
    """A turn, and a short interval's shared turn, commit pipelined; under load, or when
    every poll commits (task.commit.ms=0), the loop waits for the commit."""
    assert CommitTurns(every_s=1.0).pipelined(loaded=False)
    assert CommitTurns(every_s=0.1).pipelined(loaded=False)
    assert not CommitTurns(every_s=0.1).pipelined(loaded=True)
    assert not CommitTurns(every_s=0.0).pipelined(loaded=False)

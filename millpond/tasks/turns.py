"""When each task commits: all together under load, in turns while the loop keeps up.

A commit of every task at once stops processing while their dirty entries are written down
and their transactions commit: about 8 ms per task at 5k msg/s (lab notes, 2026-11-29), and
a record that arrived then waited it out whole: that pause set a lightly loaded job's tail
latency. So while the loop keeps up (its last poll did not fill a batch) the tasks that are
due commit a turn at a time, turns at least ``gap_s`` apart, and stay staggered from then
on; a turn's commit is pipelined (millpond.tasks.commit: only its own task waits for it).
A short interval's tasks share turns (at ``task.commit.ms=100`` four 25 ms turns raised the
median instead), and that shared turn is pipelined too: each task's commit starts on a
commit thread while the loop goes on (p99 at 100 ms ~117 ms against ~122 with the loop
waiting, lab notes 2026-12-07). Under load (a full batch) every task commits when the first
is due, side by side while the loop waits: their transactions overlap, which is what
throughput needs. A task commits at most one interval plus a turn per task late.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

TURN_GAP_S = 0.1  # the least time between two turns while the loop keeps up


class CommitTurns:
    """Each open task's last commit (or arrival), and whose turn it is."""

    def __init__(self, every_s: float, gap_s: float = TURN_GAP_S, start: float = 0.0) -> None:
        self.every_s = every_s
        self.gap_s = gap_s
        self._last: dict[int, float] = {}  # partition -> monotonic time of its last commit
        # the last turn, or the loop's start: a task that arrives joins the current interval
        self._last_turn = start

    def track(self, partitions: Iterable[int], now: float) -> None:
        """The tasks open now: a gone one is forgotten; a new one counts from the last turn
        (or the loop's start), so it commits with the next turns as it did when every task
        shared one timer, not a whole interval after its opening (a job whose input takes
        less than an interval would otherwise first commit at its end)."""
        current = set(partitions)
        if current == self._last.keys():
            return
        for p in [p for p in self._last if p not in current]:
            del self._last[p]
        for p in current:
            self._last.setdefault(p, min(now, self._last_turn))

    def since(self, partition: int, now: float) -> float:
        """Seconds since the task of ``partition`` last committed (0 if not tracked)."""
        last = self._last.get(partition)
        return now - last if last is not None else 0.0

    def due(self, now: float, loaded: bool) -> list[int]:
        """The partitions whose tasks commit now (none: an empty list)."""
        if self.every_s <= 0:  # task.commit.ms=0: after every poll, all together
            return sorted(self._last)
        overdue = sorted((last, p) for p, last in self._last.items()
                         if now - last >= self.every_s)
        if not overdue:
            return []
        turns = min(len(self._last), int(self.every_s / self.gap_s + 1e-9))
        if loaded or turns <= 1:
            return sorted(self._last)
        if now - self._last_turn < self.gap_s:
            return []
        per_turn = math.ceil(len(self._last) / turns)
        return sorted(p for _, p in overdue[:per_turn])

    def pipelined(self, loaded: bool) -> bool:
        """Whether the due tasks commit pipelined (each on a commit thread, the loop going
        on): while the loop keeps up, unless every poll commits (``task.commit.ms=0``)."""
        return not loaded and self.every_s > 0

    def committed(self, partitions: Iterable[int], now: float, turn: bool = True) -> None:
        """The tasks of ``partitions`` committed at ``now``: a turn, or (``turn`` False) a
        commit a task asked for, which holds no other task's turn back."""
        for p in partitions:
            if p in self._last:
                self._last[p] = now
        if turn:
            self._last_turn = now

"""When each task commits: every ``task.commit.ms``, in turns spread over the interval.

A commit stops the run loop while it writes the committing tasks' state down and waits for
their transactions (~5-10 ms a task here), so committing every task at once stopped
processing for the sum once an interval: at a moderate rate that pause, not the processing,
set the latency tail. In turns, each task still commits once per interval (its own
transaction boundaries and exactness are unchanged), but the pauses are one task long and
spread across the interval.

Under load (no poll since the last turn found the input empty) a task whose turn comes
commits with all the others, as before: their transactions then commit side by side on the
commit threads (millpond.tasks.commit), which costs the loop less than the same commits one
at a time. When the load falls, the next tasks found due together are spread again.

Turns are at least TURN_GAP_S apart (a task's commit here takes ~5-10 ms, ~15-25 with a
local checkpoint): with more tasks than the interval has such gaps, tasks share turns, and
at exactly-once's default 100 ms every task commits in one turn, as before. (Measured at
100 ms and 5,000 msg/s: four turns of 25 ms raised the read_committed median from 67-70 to
90 ms, as the loop spent its time in four commits' fixed costs.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")
TURN_GAP_S = 0.1  # turns at least this far apart: tasks beyond interval / gap share turns


class CommitTurns:
    """Each open task's next commit time (monotonic seconds), by partition."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._due: dict[int, float] = {}

    def due(self, tasks: Mapping[int, T], now: float, loaded: bool = False) -> list[T]:
        """The tasks to commit now, in partition order: those whose turn has come, or every
        task when one is due and ``loaded``. When a task is seen for the first time, every
        task gets a new turn within the next interval, spread evenly over it."""
        every = self.every_s
        if every <= 0:
            return [tasks[p] for p in sorted(tasks)]
        for p in [p for p in self._due if p not in tasks]:
            del self._due[p]
        if any(p not in self._due for p in tasks):
            # tasks arrived (they open over several polls): every task takes a new turn, so
            # those that opened apart do not land on the others' turns
            self._spread(list(tasks), now)
        ready = [p for p, at in self._due.items() if at <= now]
        if not ready:
            return []
        return [tasks[p] for p in sorted(tasks if loaded else ready)]

    def committed(self, partitions: Iterable[int], now: float, spread: bool) -> None:
        """``partitions`` committed at ``now``: each next turn one interval later (a turn
        kept in its slot). ``spread``: when every task committed together (under load),
        they take turns over the next interval instead."""
        every = self.every_s
        done = sorted(partitions)
        if len(done) > 1 and len(done) == len(self._due):  # every task, together
            if spread:
                self._spread(done, now)
            else:  # under load: together again, until a light load spreads them
                for p in done:
                    self._due[p] = now + every
            return
        for p in done:
            # in its slot when its turn had come (unless a whole interval late); a task
            # that committed before its turn (with a loaded loop's others) from now
            was = self._due.get(p)
            at = was + every if was is not None and was <= now else now
            self._due[p] = at if at > now else now + every

    def _spread(self, partitions: list[int], now: float) -> None:
        """Turns for ``partitions`` over the next interval: as many as TURN_GAP_S allows,
        evenly apart, the tasks in partition order sharing them evenly."""
        done = sorted(partitions)
        n = len(done)
        turns = max(1, min(n, int(self.every_s / TURN_GAP_S + 1e-9)))
        for k, p in enumerate(done):
            self._due[p] = now + self.every_s * (k * turns // n + 1) / turns

    def since(self, partition: int, now: float) -> float:
        """Seconds since ``partition``'s last turn (0 for a task without one yet)."""
        at = self._due.get(partition)
        return 0.0 if at is None else max(0.0, now - (at - self.every_s))

"""Writing the stores' dirty cache entries down while the run loop is idle, ahead of a commit.

A commit stops processing while it writes every dirty entry down (RocksDB and one changelog
record per key), so at a moderate rate its pause, not the processing, sets the tail latency.
In the last WRITE_AHEAD_SHARE of each commit interval an idle loop (a poll found no input)
writes WRITE_AHEAD_CHUNK entries at a time, oldest first, checking for input between
chunks; the commit then writes only what was dirtied since. One pass per commit interval
covers the entries dirty when it began, so a key is written down at most twice per commit
(a busy loop is never idle and writes down only at the commit, as before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from millpond.tasks.instance import TASK_MOVED, TaskInstance

WRITE_AHEAD_SHARE = 0.2  # the part of the commit interval before a commit that writes ahead
WRITE_AHEAD_CHUNK = 200  # entries per idle step (~1-2 ms): a record waits at most that


class WriteAhead:
    """When an idle loop writes ahead, and which tasks have their pass of the current
    commit interval (tasks commit in turns: :mod:`millpond.tasks.turns`)."""

    def __init__(self, commit_every_s: float, share: float = WRITE_AHEAD_SHARE,
                 chunk: int = WRITE_AHEAD_CHUNK) -> None:
        # starts this long after a commit (never when commits follow every poll)
        self.after_s = commit_every_s * (1 - share) if commit_every_s > 0 else None
        self.chunk = chunk
        self.planned: set[int] = set()  # partitions whose pass of this interval is planned

    def committed(self, partitions: Iterable[int]) -> None:
        """These tasks committed: their next interval gets a pass of its own."""
        self.planned.difference_update(partitions)

    def step(self, tasks: Iterable[tuple[TaskInstance, float]],
             moved: Callable[[TaskInstance, Exception], None]) -> bool:
        """The loop is idle; ``tasks`` with the seconds since each last committed: for those
        within the share before their next commit, write down one chunk; whether anything
        was written. A task whose transaction was fenced or aborted meanwhile goes to
        ``moved`` (it is closed as at a commit)."""
        if self.after_s is None:
            return False
        tasks = list(tasks)
        # a task gone (closed, moved) is forgotten: reopened, its new storage plans anew
        self.planned.intersection_update(t.partition for t, _ in tasks)
        written = 0
        for t, since in tasks:
            if since < self.after_s:
                continue
            if t.partition not in self.planned:
                self.planned.add(t.partition)
                t.storage.plan_write_ahead()
            try:
                written += t.storage.write_ahead(self.chunk - written)
            except TASK_MOVED as exc:
                moved(t, exc)
                return True
            if written >= self.chunk:
                break
        return written > 0

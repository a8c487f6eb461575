"""Where a process's start-up went: one log line, once the tasks of its first assignment are
all ready, with the time of each phase since the process started.

Phases end where the container marks them (:meth:`StartupTimeline.mark`): the interpreter,
imports and config; waiting for Kafka; the ACL check; the job's topics; joining the group
(partitions assigned); opening the tasks (producer fencing, checkpoints, stores, restores).
A later rebalance's openings are not a start-up: each task's "ready" line says those.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger("millpond.container")


def process_started_at() -> float | None:
    """The epoch time this process started (Linux: its start in ``/proc/self/stat`` against
    ``/proc/uptime``, both since boot, to the clock tick: 10 ms), or None where that cannot
    be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # Field 22 (starttime, ticks since boot); the command name (field 2) may hold
            # spaces, so count from the ')' that ends it.
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - max(0.0, age)


class StartupTimeline:
    """Phase marks from the start to the first assignment's tasks all ready.

    ``started``: the epoch time it starts from (default: now); ``since`` says what that
    was, in the line; ``clock``: the epoch clock (a test's). :meth:`of_process` starts from
    the process's own start (the CLI's; a container made inside a longer-lived process
    starts from its making)."""

    def __init__(self, started: float | None = None,
                 clock: Callable[[], float] = time.time,
                 since: str = "the container was made") -> None:
        self.clock = clock
        self.started = started if started is not None else clock()
        self.since = since
        self.marks: list[tuple[str, float]] = []
        self.reported = False

    @classmethod
    def of_process(cls) -> StartupTimeline:
        """A timeline from this process's start (from now where that cannot be read)."""
        at = process_started_at()
        return cls() if at is None else cls(at, since="the process started")

    def mark(self, phase: str) -> None:
        """``phase`` ended now (it began where the previous one ended). Ignored once the
        line was logged."""
        if not self.reported:
            self.marks.append((phase, self.clock()))

    def mark_once(self, phase: str) -> None:
        """:meth:`mark`, unless ``phase`` was marked already (the CLI waits for Kafka before
        its ACL check; the container's own wait then adds nothing to report)."""
        if all(name != phase for name, _ in self.marks):
            self.mark(phase)

    def phases(self) -> list[tuple[str, float]]:
        """Each phase and its seconds, in order."""
        out, at = [], self.started
        for phase, when in self.marks:
            out.append((phase, max(0.0, when - at)))
            at = when
        return out

    def line(self, tasks: int) -> str:
        """The log line: the total, then each phase."""
        total = (self.marks[-1][1] - self.started) if self.marks else 0.0
        parts = "; ".join(f"{phase} {seconds:.3f} s" for phase, seconds in self.phases())
        return f"start-up: all {tasks} task(s) ready {total:.3f} s after {self.since}: {parts}"

    def ready(self, tasks: int) -> None:
        """The first assignment's ``tasks`` are all open: mark it and log the line, once."""
        if self.reported:
            return
        self.mark("tasks opened")
        self.reported = True
        log.info("%s", self.line(tasks))

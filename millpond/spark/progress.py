"""Progress of the Spark jobs a ``millpond spark`` command runs: tasks done of tasks known.

Spark's own console progress bar is off (``spark.ui.showConsoleProgress``: it draws over log
lines and says nothing of which command it belongs to). Instead :func:`spark_progress` polls
the active SparkContext's status tracker from a thread and shows one
:class:`millpond.progress.Progress` for the whole command: a bar on a terminal, plain lines
(``spark audit hourly-counts: 12/40 tasks``) elsewhere. Only stages that ran count; the total
grows as the command's later jobs start.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from millpond.progress import PLAIN_EVERY_S, Progress

log = logging.getLogger(__name__)

POLL_S = 1.0


class StageCounter:
    """Tasks of the stages that ran, from a ``StatusTracker``'s jobs and stages."""

    def __init__(self) -> None:
        self.stages: dict[int, tuple[int, int]] = {}  # stage id: (tasks, completed)

    def poll(self, tracker: Any) -> tuple[int, int]:
        """Update from ``tracker``; return (done, total) tasks."""
        for job_id in tracker.getJobIdsForGroup():
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job is not None else ():
                known = self.stages.get(stage_id)
                if known is not None and known[1] >= known[0]:
                    continue  # finished: no need to ask again
                info = tracker.getStageInfo(stage_id)
                if info is None:
                    continue
                if info.numCompletedTasks or info.numActiveTasks:  # skipped stages never start
                    self.stages[stage_id] = (info.numTasks, info.numCompletedTasks)
        done = sum(min(tasks, completed) for tasks, completed in self.stages.values())
        return done, sum(tasks for tasks, _ in self.stages.values())


class _Watcher:
    def __init__(self, label: str, stream: IO[str] | None, tty: bool | None, poll_s: float,
                 every_s: float) -> None:
        self.label, self.stream, self.tty = label, stream, tty
        self.poll_s, self.every_s = poll_s, every_s
        self.counter = StageCounter()
        self.progress: Progress | None = None
        self.stopped = threading.Event()
        self.began = time.monotonic()

    def run(self) -> None:
        while not self.stopped.wait(self.poll_s):
            if not self.poll():
                return

    def poll(self) -> bool:
        """One look at Spark's status; False once it cannot be read (Spark stopped)."""
        pyspark = sys.modules.get("pyspark")
        context = getattr(pyspark, "SparkContext", None)
        sc = getattr(context, "_active_spark_context", None)
        if sc is None:
            return True  # not started yet (or between sessions)
        try:
            done, total = self.counter.poll(sc.statusTracker())
        except Exception as exc:  # noqa: BLE001 - stopped under us: progress is not vital
            log.debug("spark progress: %s", exc)
            return False
        if total and self.progress is None:
            self.progress = Progress(self.label, total, "tasks", stream=self.stream,
                                     tty=self.tty, every_s=self.every_s)
            self.progress.began = self.began  # "done in": the whole command's time
        if self.progress is not None:
            self.progress.update(done, total)
        return True

    def stop(self, thread: threading.Thread, ok: bool) -> None:
        self.stopped.set()
        thread.join(timeout=10)
        if ok and not thread.is_alive():
            self.poll()  # the last stages, done since the last look
            if self.progress is not None:
                self.progress.finish(self.progress.total)
        elif self.progress is not None:
            self.progress.close()


@contextmanager
def spark_progress(label: str, *, stream: IO[str] | None = None, tty: bool | None = None,
                   poll_s: float = POLL_S, every_s: float = PLAIN_EVERY_S) -> Iterator[None]:
    """Show the progress of the Spark jobs run inside the block as ``label``'s tasks."""
    watcher = _Watcher(label, stream, tty, poll_s, every_s)
    thread = threading.Thread(target=watcher.run, name="spark-progress", daemon=True)
    thread.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        watcher.stop(thread, ok)

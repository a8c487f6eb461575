"""What live queries (:mod:`millpond.query`) see of this process's tasks.

Read on the run loop's thread only (the mailbox serves queries between iterations), so the
task table, the opener's progress and the stores are never read while they change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from millpond.changelog.checkpoint import task_name
from millpond.query import Open, StoreView, Unavailable
from millpond.serdes import Serde
from millpond.tasks.manager import TaskManager


class TaskDirectory:
    """A :class:`millpond.query.Directory` over the task manager's open and opening tasks."""

    def __init__(self, manager: TaskManager,
                 serdes: Mapping[str, tuple[Serde[Any], Serde[Any]]]) -> None:
        self.manager = manager
        self.serdes = serdes

    def locate(self, partition: int) -> Open | Unavailable:
        """The open task of ``partition``'s stores, else why it cannot be read here."""
        tasks = self.manager.tasks
        instance = tasks.get(partition)
        name = task_name(partition)
        if instance is not None:
            return Open({store: StoreView(*self.serdes[store], s.engine, s.cache)
                         for store, s in instance.storage.stores.items()})
        opener = self.manager.opener
        if partition in opener.pending:
            if opener.opening == partition:
                progress = {s.store: {"records": s.records, "remaining": s.remaining,
                                      "seconds": round(s.seconds, 3)}
                            for s in opener.progress.values()}
                return Unavailable(f"task {name} is opening here: restoring its stores "
                                   "(fencing its producer, reading its checkpoint or "
                                   "replaying changelogs)", progress)
            return Unavailable(f"task {name} is assigned here and waiting to open (after "
                               "the tasks before it, or a rebalance)")
        held = ", ".join(map(str, sorted(tasks))) or "none"
        return Unavailable(f"partition {partition} is not assigned to this process (it holds "
                           f"partitions: {held})")

"""What live queries (:mod:`millpond.query`) see of this process's tasks.

Read on the run loop's thread only (the mailbox serves queries between iterations), so the
task table, the opener's progress and the stores are never read while they change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from millpond.changelog.checkpoint import task_name
from millpond.job import Job
from millpond.query import Open, StoreView, Unavailable
from millpond.query.reads import Committed, PointReader
from millpond.serdes import Serde
from millpond.tasks.manager import TaskManager
from millpond.tasks.storage import OpenStore


class TaskDirectory:
    """A :class:`millpond.query.Directory` over the task manager's open and opening tasks."""

    def __init__(self, manager: TaskManager,
                 serdes: Mapping[str, tuple[Serde[Any], Serde[Any]]]) -> None:
        self.manager = manager
        self.serdes = serdes

    def locate(self, partition: int) -> Open | Unavailable:
        """The open task of ``partition``'s stores, else why it cannot be read here. An open
        task's views are made once and again only when it commits (a new snapshot, a new
        set of keys touched since): most queries are one-key gets on the run loop's thread,
        which should not build them each time. They are kept on the task, so they go
        when it closes."""
        tasks = self.manager.tasks
        instance = tasks.get(partition)
        if instance is not None:
            stores = instance.storage.stores
            found = instance.query_views
            if not isinstance(found, Open) or not _current(found, stores):
                found = instance.query_views = Open({
                    store: StoreView(*self.serdes[store], s.engine, s.cache, _committed(s))
                    for store, s in stores.items()})
            return found
        name = task_name(partition)
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
                           f"partitions: {held})", assigned=False)


def _current(found: Open, stores: Mapping[str, OpenStore]) -> bool:
    """Whether ``found``'s committed views are still those of ``stores`` (no commit since)."""
    for name, s in stores.items():
        committed, now = found.stores[name].committed, _commit_state(s)
        if committed is None or now is None:
            if committed is not now:  # a store's first commit (or its snapshot gone)
                return False
        elif committed.snapshot is not now[0] or committed.touched is not now[1]:
            return False
    return True


def _commit_state(store: OpenStore) -> tuple[PointReader, Collection[bytes] | None] | None:
    """The snapshot of ``store``'s last commit and the keys written since, if it keeps a
    snapshot (committed reads)."""
    if store.snapshot is None or store.logged is None:
        return None
    return store.snapshot, store.logged.touched  # touched None: overflowed


def _committed(store: OpenStore) -> Committed | None:
    """The store as of its task's last commit, if it keeps a snapshot (committed reads)."""
    state = _commit_state(store)
    return None if state is None else Committed(*state)


def group_owners(job: Job) -> Callable[[], dict[int, tuple[str, str]]]:
    """A describe of ``job``'s group: partition -> (client id, host) of the member holding
    it (the group subscribes to the first input, so its partitions are the tasks')."""
    first = job.config.job.inputs[0].topic

    def describe() -> dict[int, tuple[str, str]]:
        desc = job.admin.describe_group(job.group_id)
        owners: dict[int, tuple[str, str]] = {}
        for member in desc.members if desc is not None else ():
            tps = member.assignment.topic_partitions if member.assignment is not None else []
            owners.update({tp.partition: (member.client_id, member.host)
                           for tp in tps if tp.topic == first})
        return owners

    return describe

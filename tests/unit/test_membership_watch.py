"""A group consumer that never gets back into its group is replaced (the run loop's watch)."""

from __future__ import annotations

import time
from typing import Any

from millpond.tasks.container import rejoin_after_s
from millpond.tasks.manager import TaskManager
from millpond.tasks.opening import TaskOpener
from millpond.tasks.runloop import LoopTiming, RunLoop


class Consumer:
    """The calls the manager makes on a group consumer for an assignment or a loss."""

    def incremental_assign(self, tps: Any) -> None: ...
    def incremental_unassign(self, tps: Any) -> None: ...
    def pause(self, tps: Any) -> None: ...


def watched(after_s: float) -> tuple[TaskManager, RunLoop, list[float]]:
    opener = TaskOpener(lambda p: iter(()), hold_s=0.0)  # type: ignore[arg-type,return-value]
    manager = TaskManager({}, Consumer(), opener, None, ["in"])  # type: ignore[arg-type]
    rejoins: list[float] = []
    run = RunLoop.__new__(RunLoop)
    run.manager = manager
    run.timing = LoopTiming(commit_every_s=1.0, window_every_s=0.0, status_every_s=10.0,
                            rejoin_after_s=after_s)
    run._rejoin = lambda: rejoins.append(time.monotonic())
    return manager, run, rejoins


def test_no_assignment_long_after_subscribing_or_a_loss_rejoins() -> None:
    manager, run, rejoins = watched(after_s=60.0)
    start = time.monotonic()
    run._check_membership(start + 59)
    assert rejoins == []  # still within a rebalance's bound
    run._check_membership(start + 61)
    assert len(rejoins) == 1  # subscribed and never assigned

    manager.assigned([0, 1])
    run._check_membership(start + 1000)
    assert len(rejoins) == 1  # in the group: never replaced, however long

    manager.lost([0, 1])  # librdkafka rejoins by itself; once it never did
    lost_at = time.monotonic()
    run._check_membership(lost_at + 30)
    assert len(rejoins) == 1
    run._check_membership(lost_at + 61)
    assert len(rejoins) == 2


def test_an_empty_assignment_is_membership_too() -> None:
    """More processes than partitions: a member assigned nothing is in the group."""
    manager, run, rejoins = watched(after_s=60.0)
    manager.assigned([])
    run._check_membership(time.monotonic() + 1000)
    assert rejoins == []


def test_the_bound_is_a_rebalance_timeout_and_a_session_past_the_job_settings() -> None:
    assert rejoin_after_s({}) == 300 + 45 + 60  # librdkafka's defaults
    assert rejoin_after_s({"max.poll.interval.ms": "60000", "session.timeout.ms": 10000}) == 130
    _, run, rejoins = watched(after_s=0.0)  # 0: never
    run._check_membership(time.monotonic() + 10_000)
    assert rejoins == []

"""Recovery's choice of a remote snapshot (pure planning, no broker, no object store):
only after the local copies, never beyond the restore target, inside the changelog."""

from __future__ import annotations

from pathlib import Path

from millpond.changelog.checkpoint import StoreOffset
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.recovery import (
    LocalCopy,
    LocalState,
    Observation,
    OffsetFile,
    RecoveryPlan,
    StorePartition,
    plan_recovery,
)
from millpond.changelog.snapshots import SnapshotRef

TOPIC = "job-counts-changelog"
WHERE = StorePartition("counts", TOPIC, 0, Path("/nonexistent/counts/partition-0"))
EO, ALO = Guarantee.EFFECTIVELY_ONCE, Guarantee.AT_LEAST_ONCE


def snap(offset: int, topic: str = TOPIC) -> SnapshotRef:
    return SnapshotRef(f"s{offset}", "counts", topic, 0, offset)


def obs(*refs: SnapshotRef, guarantee: Guarantee = EO, low: int = 0, high: int = 100,
        checkpointed: int | None = 79, local: LocalState | None = None,
        error: str | None = None) -> Observation:
    return Observation(WHERE, guarantee, low, high, checkpointed, local or LocalState(),
                       tuple(refs), error)


def test_the_newest_consistent_snapshot_is_chosen() -> None:
    plan = plan_recovery(obs(snap(90), snap(60), snap(40)))
    assert (plan.copy, plan.begin, plan.end) == (LocalCopy.REMOTE, 61, 80)
    assert [s.offset for s in plan.snapshots] == [60, 40]  # the fallbacks, newest first
    assert any("s90" in w and "beyond the restore target 79" in w for w in plan.warnings)


def test_at_least_once_restores_to_the_end() -> None:
    plan = plan_recovery(obs(snap(90), guarantee=ALO))
    assert (plan.copy, plan.begin, plan.end) == (LocalCopy.REMOTE, 91, 100)


def test_outside_the_changelog_or_of_another_topic_is_not_used() -> None:
    plan = plan_recovery(obs(snap(70, "other-changelog"), snap(10), low=30))
    assert plan.copy is LocalCopy.NOTHING and plan.begin == 30
    assert len(plan.warnings) == 2


def test_a_local_copy_comes_first() -> None:
    local = LocalState(checkpoint=OffsetFile(StoreOffset("counts", TOPIC, 0, 50)))
    plan = plan_recovery(obs(snap(70), local=local))
    assert (plan.copy, plan.begin) == (LocalCopy.CHECKPOINT, 51)


def test_an_unreachable_remote_means_the_changelog_with_a_warning() -> None:
    plan = plan_recovery(obs(error="EndpointConnectionError: no route"))
    assert plan.copy is LocalCopy.NOTHING and plan.begin == 0
    assert "could not be listed (EndpointConnectionError: no route)" in plan.warnings[0]


def test_a_plan_from_a_snapshot_keeps_only_that_snapshot() -> None:
    old, new = (SnapshotRef(i, "counts", "t", 0, off) for i, off in (("a", 4), ("b", 9)))
    plan = RecoveryPlan(LocalCopy.REMOTE, 0, 20, None, 2, snapshots=(new, old))
    assert plan.from_snapshot(old) == RecoveryPlan(LocalCopy.REMOTE, 5, 20, None, 2,
                                                   snapshots=(old,))
    assert plan.from_snapshot(SnapshotRef("c", "counts", "t", 0, -1)).begin == 2  # the low


def test_a_snapshot_at_the_restore_target_is_used_one_past_it_is_not() -> None:
    plan = plan_recovery(obs(snap(80), snap(79)))  # checkpointed 79: the target is 79
    assert (plan.copy, plan.begin, plan.end) == (LocalCopy.REMOTE, 80, 80)
    assert [s.offset for s in plan.snapshots] == [79]
    assert any("s80" in w and "beyond the restore target 79" in w for w in plan.warnings)


def test_a_snapshot_just_before_the_changelog_start_is_used_two_before_is_not() -> None:
    # The changelog starts at 30: a snapshot at 29 goes on from 30; one at 28 misses 29.
    plan = plan_recovery(obs(snap(29), checkpointed=None, low=30))
    assert (plan.copy, plan.begin) == (LocalCopy.REMOTE, 30)
    plan = plan_recovery(obs(snap(28), checkpointed=None, low=30))
    assert (plan.copy, plan.begin) == (LocalCopy.NOTHING, 30)
    assert any("s28" in w and "now starts at 30" in w for w in plan.warnings)


def test_a_local_copy_has_the_same_bounds_as_a_snapshot() -> None:
    def at(offset: int) -> LocalState:
        return LocalState(checkpoint=OffsetFile(StoreOffset("counts", TOPIC, 0, offset)))

    plan = plan_recovery(obs(local=at(79)))  # at the restore target: nothing to replay
    assert (plan.copy, plan.begin, plan.end) == (LocalCopy.CHECKPOINT, 80, 80)
    plan = plan_recovery(obs(local=at(80)))
    assert plan.copy is LocalCopy.NOTHING and plan.begin == 0
    assert "ahead of the restore target 79" in plan.warnings[0]
    plan = plan_recovery(obs(local=at(29), checkpointed=None, low=30))
    assert (plan.copy, plan.begin) == (LocalCopy.CHECKPOINT, 30)
    plan = plan_recovery(obs(local=at(28), checkpointed=None, low=30))
    assert (plan.copy, plan.begin) == (LocalCopy.NOTHING, 30)
    assert "now starts at 30; doing a full restore" in plan.warnings[0]

"""Recovery planning as a table of situations -> decisions (pure, no broker), and the act
step on real directories where it needs no changelog records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from millpond.changelog import local
from millpond.changelog.checkpoint import (
    NO_OFFSET,
    StoreOffset,
    read_offset_file,
    write_offset_file,
)
from millpond.changelog.errors import ChangelogLostError
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.recovery import (
    LocalCopy,
    LocalState,
    Observation,
    OffsetFile,
    RecoveryIO,
    RecoveryPlan,
    RecoveryWarning,
    StorePartition,
    carry_out,
    local_start,
    plan_recovery,
)
from millpond.changelog.restore import run_steps
from millpond.stores import RocksDbEngine

TOPIC = "job-counts-changelog"
LIVE = Path("/nonexistent/state/job/counts/partition-0")  # the plan must never look at it
ALO, EO, XO = Guarantee.AT_LEAST_ONCE, Guarantee.EFFECTIVELY_ONCE, Guarantee.EXACTLY_ONCE
CORRUPT = OffsetFile(error=f"{LIVE}/OFFSET: corrupt OFFSET file (Expecting value)")


def at(offset: int, topic: str = TOPIC, partition: int = 0) -> OffsetFile:
    return OffsetFile(StoreOffset("counts", topic, partition, offset))


def observation(guarantee: Guarantee = EO, low: int = 0, high: int = 100,
                checkpointed: int | None = 79, live: OffsetFile | None = None,
                ckpt: OffsetFile | None = None, in_memory: bool = False) -> Observation:
    state = None if in_memory else LocalState(live or OffsetFile(), ckpt or OffsetFile())
    where = StorePartition("counts", TOPIC, 0, None if in_memory else LIVE)
    return Observation(where, guarantee, low, high, checkpointed, state)


@dataclass
class Row:
    situation: str
    obs: Observation
    copy: LocalCopy
    begin: int
    end: int
    trim_end: int | None
    warnings: list[str] = field(default_factory=list)  # a substring of each warning, in order


N, L, C = LocalCopy.NOTHING, LocalCopy.LIVE, LocalCopy.CHECKPOINT
TABLE = [
    # Local copies.
    Row("clean live dir", observation(live=at(79), ckpt=at(79)), L, 80, 80, 100),
    Row("clean live dir behind the target (at-least-once)",
        observation(ALO, live=at(49), ckpt=at(49)), L, 50, 100, None),
    Row("dirty live dir with checkpoint", observation(ckpt=at(79)), C, 80, 80, 100),
    Row("checkpoint behind the target", observation(ALO, ckpt=at(59)), C, 60, 100, None),
    Row("no local state", observation(), N, 0, 80, 100),
    Row("live OFFSET of another partition: checkpoint",
        observation(live=at(79, partition=1), ckpt=at(79)), C, 80, 80, 100),
    Row("live OFFSET of another topic, no checkpoint",
        observation(ALO, live=at(79, topic="other")), N, 0, 100, None),
    # Local copies the changelog's range rules out.
    Row("live ahead of the target", observation(live=at(89), ckpt=at(79)), N, 0, 80, 100,
        ["at changelog offset 89, ahead of the restore target 79"]),
    Row("checkpoint ahead of the target", observation(ckpt=at(89)), N, 0, 80, 100,
        ["at changelog offset 89, ahead of the restore target 79"]),
    Row("live at the changelog end + 1 (at-least-once)", observation(ALO, live=at(100)),
        N, 0, 100, None, ["ahead of the restore target 99"]),
    Row("live below the low watermark", observation(ALO, low=50, live=at(30)), N, 50, 100,
        None, [f"at changelog offset 30 but {TOPIC}[0] now starts at 50; doing a full restore"]),
    Row("live just before the low watermark", observation(ALO, low=50, live=at(49)),
        L, 50, 100, None),
    Row("live empty (NO_OFFSET), changelog head compacted",
        observation(ALO, low=50, live=at(NO_OFFSET)), L, 50, 100, None),
    # Corrupt OFFSET files.
    Row("corrupt live OFFSET, good checkpoint", observation(live=CORRUPT, ckpt=at(79)),
        C, 80, 80, 100,
        ["corrupt OFFSET file (Expecting value); using the last commit's checkpoint or a full "
         "restore"]),
    Row("corrupt live and checkpoint OFFSET", observation(live=CORRUPT, ckpt=CORRUPT),
        N, 0, 80, 100, ["; using the last commit's checkpoint or a full restore",
                        "corrupt OFFSET file (Expecting value); doing a full restore"]),
    Row("corrupt live OFFSET, no checkpoint", observation(live=CORRUPT), N, 0, 80, 100,
        ["using the last commit's checkpoint or a full restore"]),
    Row("corrupt checkpoint OFFSET is not consulted when live is clean",
        observation(live=at(79), ckpt=CORRUPT), L, 80, 80, 100),
    # Guarantees.
    Row("at-least-once restores to the end", observation(ALO, live=at(79)), L, 80, 100, None),
    Row("effectively-once at the changelog end: nothing to trim",
        observation(EO, checkpointed=99, live=at(99)), L, 100, 100, None),
    Row("exactly-once restores to the LSO, never trims", observation(XO, live=at(79)),
        L, 80, 100, None),
    # In-memory stores: no directory, always a full restore.
    Row("in-memory, effectively-once", observation(in_memory=True), N, 0, 80, 100),
    Row("in-memory, at-least-once, head compacted", observation(ALO, low=20, in_memory=True),
        N, 20, 100, None),
    # No checkpoint yet.
    Row("no checkpoint yet, effectively-once: tombstone everything",
        observation(checkpointed=None), N, 0, 0, 100),
    Row("no checkpoint yet, effectively-once, local state is ahead",
        observation(checkpointed=None, live=at(50)), N, 0, 0, 100,
        ["at changelog offset 50, ahead of the restore target -1"]),
    Row("no checkpoint yet, at-least-once", observation(ALO, checkpointed=None), N, 0, 100, None),
    Row("no checkpoint yet, exactly-once", observation(XO, checkpointed=None), N, 0, 100, None),
    Row("empty changelog", observation(ALO, high=0, checkpointed=None), N, 0, 0, None),
    Row("effectively-once, head compacted", observation(low=30), N, 30, 80, 100),
]


@pytest.mark.parametrize("row", TABLE, ids=[r.situation for r in TABLE])
def test_plan(row: Row) -> None:
    plan = plan_recovery(row.obs)
    assert (plan.copy, plan.begin, plan.end, plan.trim_end) == (
        row.copy, row.begin, row.end, row.trim_end)
    assert plan.full is (row.copy is LocalCopy.NOTHING)
    assert plan.offset == (row.end - 1 if row.end > 0 else NO_OFFSET)
    assert len(plan.warnings) == len(row.warnings), plan.warnings
    for warning, expected in zip(plan.warnings, row.warnings, strict=True):
        assert expected in warning


@pytest.mark.parametrize("guarantee", list(Guarantee))
@pytest.mark.parametrize(("checkpointed", "high"), [(100, 100), (5000, 100), (0, 0)])
@pytest.mark.parametrize("in_memory", [False, True])
def test_checkpoint_past_the_changelog_end_is_a_lost_changelog(
    guarantee: Guarantee, checkpointed: int, high: int, in_memory: bool,
) -> None:
    obs = observation(guarantee, high=high, checkpointed=checkpointed, live=at(checkpointed),
                      ckpt=at(checkpointed), in_memory=in_memory)
    with pytest.raises(ChangelogLostError, match=f"ends at offset {high} .* wrote offset "
                                                 f"{checkpointed}.*restore --from-local"):
        plan_recovery(obs)


@pytest.mark.parametrize("guarantee", list(Guarantee))
@pytest.mark.parametrize(("checkpointed", "low"), [(79, 81), (79, 100), (0, 2)])
@pytest.mark.parametrize("local", ["intact", "lost"])
def test_changelog_start_past_the_checkpoint_is_a_lost_changelog(
    guarantee: Guarantee, checkpointed: int, low: int, local: str,
) -> None:
    """Records up to the checkpointed offset were deleted (DeleteRecords): the job stops
    whether or not the local store still holds them."""
    at_ckpt = at(checkpointed) if local == "intact" else None
    obs = observation(guarantee, low=low, high=100, checkpointed=checkpointed, live=at_ckpt,
                      ckpt=at_ckpt)
    with pytest.raises(ChangelogLostError, match=f"starts at offset {low} .* wrote offset "
                                                 f"{checkpointed}.*truncated.*restore --from-local"):
        plan_recovery(obs)


@pytest.mark.parametrize("guarantee", list(Guarantee))
def test_changelog_start_just_past_the_checkpoint_is_not_a_loss(guarantee: Guarantee) -> None:
    """A store restored from an emptied changelog reflects ``low - 1`` without having
    written it, and a checkpoint of nothing (NO_OFFSET) names no offset at all."""
    plan = plan_recovery(observation(guarantee, low=80, high=100, checkpointed=79,
                                     live=at(79), ckpt=at(79)))
    assert plan.copy is LocalCopy.LIVE and plan.begin == 80
    empty = plan_recovery(observation(guarantee, low=80, high=100, checkpointed=NO_OFFSET))
    assert empty.copy is LocalCopy.NOTHING and empty.begin == 80


def test_a_fallback_full_restore_keeps_the_target_and_trim() -> None:
    plan = plan_recovery(observation(low=10, live=at(79)))
    assert plan.copy is LocalCopy.LIVE and not plan.full
    full = plan.as_full_restore()
    assert (full.copy, full.begin, full.end, full.trim_end, full.full) == (
        LocalCopy.NOTHING, 10, 80, 100, True)


# -- act, on real directories, with nothing to replay (no consumer needed) ---------------------


class NoConsumer:
    """Fails the test if recovery touches Kafka when the plan replays nothing."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"consumer.{name} used with nothing to replay")


def _store(path: Path, entries: dict[bytes, bytes], offset: int | None) -> None:
    engine = RocksDbEngine(path)
    engine.write_batch(list(entries.items()))
    engine.close()
    if offset is not None:
        write_offset_file(path, StoreOffset("counts", TOPIC, 0, offset))


def _content(engine: Any) -> dict[bytes, bytes]:
    with engine.all() as entries:
        return dict(entries)


def _where(tmp_path: Path) -> StorePartition:
    return StorePartition("counts", TOPIC, 0, local.store_dir(tmp_path, "job", "counts", 0))


def _open(live: Path, fail_first: int = 0) -> Any:
    calls = {"n": 0}

    def open_engine() -> RocksDbEngine:
        calls["n"] += 1
        if calls["n"] <= fail_first:
            raise Exception("Corruption: truncated SST")  # what rocksdict raises
        live.mkdir(parents=True, exist_ok=True)
        return RocksDbEngine(live)
    return open_engine


def _run(where: StorePartition, plan: RecoveryPlan, fail_first: int = 0) -> tuple[Any, Any]:
    assert where.live is not None
    io = RecoveryIO(_open(where.live, fail_first), NoConsumer(), None)  # type: ignore[arg-type]
    return run_steps(carry_out(where, plan, io))


def test_act_replaces_a_dirty_live_dir_with_the_checkpoint(tmp_path: Path) -> None:
    where = _where(tmp_path)
    assert where.live is not None
    _store(local.checkpoint_dir(where.live), {b"a": b"1"}, 79)
    _store(where.live, {b"a": b"2", b"b": b"uncommitted"}, None)
    plan = plan_recovery(observation(ALO, high=80, ckpt=at(79)))
    assert (plan.copy, plan.begin, plan.end) == (LocalCopy.CHECKPOINT, 80, 80)
    engine, result = _run(where, plan)
    try:
        assert _content(engine) == {b"a": b"1"} and result.offset == 79
    finally:
        engine.close()
    assert read_offset_file(where.live) == StoreOffset("counts", TOPIC, 0, 79)


def test_act_falls_back_to_a_full_restore_when_the_engine_cannot_open(tmp_path: Path) -> None:
    where = _where(tmp_path)
    assert where.live is not None
    _store(where.live, {b"a": b"stale"}, 0)
    plan = plan_recovery(observation(ALO, low=1, high=1, checkpointed=None, live=at(0)))
    assert plan.copy is LocalCopy.LIVE
    with pytest.warns(RecoveryWarning, match="could not be opened .*Corruption.*full restore"):
        engine, result = _run(where, plan, fail_first=1)
    try:
        assert result.stats.full and result.stats.start_offset == 1
        assert _content(engine) == {}, "the unopenable store was wiped"
    finally:
        engine.close()


def test_act_emits_the_plans_warnings_and_wipes(tmp_path: Path) -> None:
    where = _where(tmp_path)
    assert where.live is not None
    _store(where.live, {b"a": b"1"}, 89)
    plan = plan_recovery(observation(ALO, low=0, high=0, checkpointed=None, live=at(89)))
    assert plan.copy is LocalCopy.NOTHING and len(plan.warnings) == 1
    with pytest.warns(RecoveryWarning, match="ahead of the restore target -1"):
        engine, result = _run(where, plan)
    try:
        assert _content(engine) == {} and result.offset == NO_OFFSET
    finally:
        engine.close()


def test_act_refuses_a_trim_without_a_producer_before_touching_anything(tmp_path: Path) -> None:
    where = _where(tmp_path)
    assert where.live is not None
    _store(where.live, {b"a": b"1"}, 89)
    plan = plan_recovery(observation(live=at(89)))
    assert plan.trim_end == 100
    with pytest.raises(ValueError, match="needs a producer"):
        _run(where, plan)
    assert read_offset_file(where.live) == StoreOffset("counts", TOPIC, 0, 89)


def test_local_start_replaces_a_dirty_live_dir_with_the_checkpoint(tmp_path: Path) -> None:
    live = _where(tmp_path).live
    assert live is not None
    _store(local.checkpoint_dir(live), {b"a": b"1"}, 7)
    _store(live, {b"a": b"2"}, None)
    assert local_start(live, TOPIC, 0) == 7
    assert read_offset_file(live) == StoreOffset("counts", TOPIC, 0, 7)
    engine = RocksDbEngine(live)
    try:
        assert _content(engine) == {b"a": b"1"}
    finally:
        engine.close()
    assert local_start(live, "other", 0) is None

"""A task whose store another process still holds opens once it is released, within a bound.

Two processes of a job that share one store base dir hand a partition over through the
store's lock: the previous owner releases it when its final commit is over, which a
rebalance can hold up past the moment the new owner opens (a CI run: the new owner died on
"is in use by pid"). The real lock is used; the opening is a stand-in for the task's."""

from __future__ import annotations

import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from millpond.changelog import local
from millpond.changelog.errors import StoreLockedError
from millpond.tasks import opening
from millpond.tasks.opening import TaskOpener


def _opening(live: Path, opened: list[int]) -> object:
    def steps(partition: int) -> Generator[None, None, int]:
        lock = local.StoreLock(live)
        lock.acquire()  # raises while the other holder has it
        yield None
        lock.release()
        opened.append(partition)
        return partition
    return steps


def _step_until(opener: TaskOpener, deadline_s: float) -> list[Any]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        ready: list[Any] = opener.step(0.01)
        if ready:
            return ready
        time.sleep(0.01)
    return []


def test_a_locked_store_is_tried_again_until_its_owner_lets_go(tmp_path: Path) -> None:
    live = tmp_path / "job" / "counts" / "partition-0"
    holder = local.StoreLock(live)
    holder.acquire()
    opened: list[int] = []
    opener = TaskOpener(_opening(live, opened), hold_s=5.0)  # type: ignore[arg-type]
    opener.add(0)
    assert opener.step(0.01) == []
    assert opener.pending == {0}, "still to open, not given up"
    assert not opener.due, "held for LOCKED_RETRY_S before the next try"
    time.sleep(3 * opening.LOCKED_RETRY_S)
    assert opener.step(0.01) == [] and opener.pending == {0}, "the owner still holds it"
    holder.release()
    assert _step_until(opener, 5.0) == [0]
    assert opened == [0] and opener.pending == set()


def test_a_store_held_past_the_bound_raises_the_lock_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(opening, "LOCKED_WAIT_S", 0.2)
    live = tmp_path / "job" / "counts" / "partition-0"
    holder = local.StoreLock(live)
    holder.acquire()
    try:
        opener = TaskOpener(_opening(live, []), hold_s=5.0)  # type: ignore[arg-type]
        opener.add(0)
        with pytest.raises(StoreLockedError, match="is in use by pid"):
            _step_until(opener, 5.0)
    finally:
        holder.release()

"""The run loop's poll: full batches when records are ready, no wait for a batch to fill."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from millpond.tasks.runloop import POLL_BATCH, POLL_TIMEOUT_S, QUERY_POLL_TIMEOUT_S, RunLoop
from millpond.tasks.turns import CommitTurns
from millpond.tasks.writeahead import WriteAhead


class Queue:
    """A consumer's fetch queue: ``ready`` now, then ``arriving`` (one consume call waits
    for it); records each consume call's (num, timeout)."""

    def __init__(self, ready: int, arriving: int = 0) -> None:
        self.ready, self.arriving = ready, arriving
        self.calls: list[tuple[int, float]] = []

    def consume(self, num: int, timeout: float) -> list[Any]:
        self.calls.append((num, timeout))
        if not self.ready and timeout:
            self.ready, self.arriving = self.arriving, 0
        n = min(num, self.ready)
        self.ready -= n
        return [object()] * n


def loop(queue: Queue, opening: bool = False, queries: bool = False,
         committing: bool = False) -> RunLoop:
    run = RunLoop.__new__(RunLoop)
    run._queries = (object(), object()) if queries else None  # type: ignore[assignment]
    run.manager = SimpleNamespace(  # type: ignore[assignment]
        consumer=queue, all_committing=lambda: committing,
        await_a_commit=lambda timeout_s: queue.calls.append(("await", timeout_s)))
    run.opener = SimpleNamespace(due=opening)  # type: ignore[assignment]
    run.tasks = {}
    run._ahead = WriteAhead(commit_every_s=1.0)
    run._turns = CommitTurns(1.0)  # no task: an idle poll writes nothing ahead
    return run


def test_records_ready_are_taken_at_once_up_to_a_batch() -> None:
    queue = Queue(ready=2500)
    assert [len(loop(queue)._poll()) for _ in range(3)] == [POLL_BATCH, POLL_BATCH, 500]
    assert queue.calls == [(POLL_BATCH, 0)] * 3  # never a wait while records are ready


def test_when_none_are_ready_the_first_to_arrive_ends_the_wait() -> None:
    queue = Queue(ready=0, arriving=3)
    run = loop(queue)
    assert len(run._poll()) == 1  # not a wait for a batch of 1000 or the whole timeout
    assert queue.calls == [(POLL_BATCH, 0), (1, POLL_TIMEOUT_S)]
    assert len(run._poll()) == 2  # those that came with it, without waiting
    assert queue.calls[-1] == (POLL_BATCH, 0)


def test_while_a_task_can_open_no_poll_waits() -> None:
    queue = Queue(ready=0, arriving=3)
    assert loop(queue, opening=True)._poll() == []
    assert queue.calls == [(POLL_BATCH, 0)]


def test_a_loop_serving_queries_waits_less_for_input_when_idle() -> None:
    """It answers queries between polls: an idle job's query waits at most this long."""
    queue = Queue(ready=0, arriving=0)
    assert loop(queue, queries=True)._poll() == []
    assert queue.calls == [(POLL_BATCH, 0), (1, QUERY_POLL_TIMEOUT_S)]
    assert QUERY_POLL_TIMEOUT_S < POLL_TIMEOUT_S


def test_while_every_task_commits_the_loop_waits_for_a_commit_not_for_records() -> None:
    """Records polled then would only be held (in memory outside the input budget)."""
    queue = Queue(ready=5)
    assert len(loop(queue, committing=True)._poll()) == 5
    assert queue.calls == [("await", POLL_TIMEOUT_S), (POLL_BATCH, 0)]
    queue = Queue(ready=5)
    loop(queue)._poll()
    assert queue.calls == [(POLL_BATCH, 0)]

"""Fault injection for crash tests: ``MILLPOND_CRASH_AT=<point>[:<n>][:moved]`` SIGKILLs the
process.

The process kills itself the n-th time (default 1st) it reaches the named point of the
commit sequence, so tests can prove state survives a crash between any two steps. With
``:moved`` only the hits that have something to prove count: at a commit point, a task's
commit that moves its input offsets (it processed input since its last commit); at
``mid-batch``, a batch after this process committed input, so the kill lands between
committed and uncommitted input. Just before the kill it logs one line naming the point,
the task and its input offsets (committed -> being committed), for the test to read.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

log = logging.getLogger("millpond.container")

_spec = os.environ.get("MILLPOND_CRASH_AT", "")
_point, _, _rest = _spec.partition(":")
_nth, _, _mode = _rest.partition(":")
_remaining = int(_nth or 1)
_moved_only = _mode == "moved"
_input_committed = False  # a commit of this process moved a task's input

POINTS = (
    "before-flush", "after-flush", "after-changelog-delivered", "after-checkpoint-topic",
    "after-transaction-commit", "after-local-checkpoint", "mid-batch",
)
CRASH_LOG = "MILLPOND_CRASH_AT: SIGKILL at"


_abort_spec = os.environ.get("MILLPOND_ABORT_AT", "")
_aborts_left = int(_abort_spec) if _abort_spec.isdigit() else 0


def abort_point() -> None:
    """Raise an abortable transaction error at the n-th transactional commit
    (``MILLPOND_ABORT_AT=n``), as a broker would on a failed commit."""
    global _aborts_left
    if _aborts_left <= 0:
        return
    _aborts_left -= 1
    if _aborts_left == 0:
        from confluent_kafka import KafkaError, KafkaException

        raise KafkaException(KafkaError(KafkaError._STATE, "injected abortable transaction error",
                                        txn_requires_abort=True))


def input_committed() -> None:
    """A transaction that moved a task's input offsets committed (``:moved`` counts
    ``mid-batch`` hits from then on)."""
    global _input_committed
    _input_committed = True


def crash_point(name: str, task: str | None = None, committed: dict[str, int] | None = None,
                offsets: dict[str, int] | None = None) -> None:
    """SIGKILL this process if ``MILLPOND_CRASH_AT`` names this point (and count is reached).

    At a commit point, ``task`` is the committing task, ``committed`` its input offsets as
    of its last commit and ``offsets`` those this commit writes."""
    global _remaining
    if name != _point:
        return
    if _moved_only:
        moved = committed != offsets if task is not None else _input_committed
        if not moved:
            return
    _remaining -= 1
    if _remaining <= 0:
        where = f"task {task}, input {committed} -> {offsets}" if task is not None else (
            f"input committed before: {_input_committed}")
        log.warning("%s %s (%s)", CRASH_LOG, name, where)
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)


_stall_spec = os.environ.get("MILLPOND_STALL_FETCH", "")  # <partition>:<offset>
STALL_LOG = "MILLPOND_STALL_FETCH: stopped fetching"


def stall_fetch(consumer: object, partition: int, run: list[Any]) -> None:
    """Stop fetching ``partition`` once (``MILLPOND_STALL_FETCH=<partition>:<offset>``: after
    the run loop handed its task ``run``, records up to ``offset`` or later), as if the
    client's fetcher had stopped for that partition: the run loop's stall watch must find
    it (millpond.tasks.stalls)."""
    global _stall_spec
    if not _stall_spec:
        return
    want, _, at = _stall_spec.partition(":")
    topic, offset = run[-1].topic() or "", run[-1].offset() or 0
    if int(want) != partition or offset < int(at or 0):
        return
    _stall_spec = ""
    from confluent_kafka import Consumer, TopicPartition

    assert isinstance(consumer, Consumer)
    consumer.pause([TopicPartition(topic, partition)])
    log.warning("%s %s[%d] after offset %d", STALL_LOG, topic, partition, offset)

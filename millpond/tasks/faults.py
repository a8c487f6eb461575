"""Fault injection for crash tests: ``MILLPOND_CRASH_AT=<point>[:<n>]`` SIGKILLs the process.

The process kills itself the n-th time (default 1st) it reaches the named point of the
commit sequence, so tests can prove state survives a crash between any two steps.
"""

from __future__ import annotations

import os
import signal

_spec = os.environ.get("MILLPOND_CRASH_AT", "")
_point, _, _nth = _spec.partition(":")
_remaining = int(_nth or 1)

POINTS = (
    "before-flush", "after-flush", "after-changelog-delivered", "after-checkpoint-topic",
    "after-transaction-commit", "after-local-checkpoint", "mid-batch",
)


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


def crash_point(name: str) -> None:
    """SIGKILL this process if ``MILLPOND_CRASH_AT`` names this point (and count is reached)."""
    global _remaining
    if name != _point:
        return
    _remaining -= 1
    if _remaining <= 0:
        os.kill(os.getpid(), signal.SIGKILL)

"""Processing guarantees: what each one means for restore, commits and reads.

* ``at-least-once``: restore every store to its changelog's end.
* ``effectively-once`` (default; Samza's transactional state): restore only up to the
  checkpointed changelog offsets, then re-write the current value of every key written
  after them, so state reflects each input exactly once; outputs are at-least-once.
* ``exactly-once``: a Kafka transaction per commit holds changelog writes, outputs and
  input offsets; everything is read ``read_committed``.
"""

from __future__ import annotations

from enum import StrEnum


class Guarantee(StrEnum):
    """The value of ``task.processing.guarantee``."""

    AT_LEAST_ONCE = "at-least-once"
    EFFECTIVELY_ONCE = "effectively-once"
    EXACTLY_ONCE = "exactly-once"

    @property
    def transactional(self) -> bool:
        """Whether writes go through Kafka transactions."""
        return self is Guarantee.EXACTLY_ONCE

    @property
    def isolation(self) -> str:
        """The ``isolation.level`` for every consumer of this job."""
        return "read_committed" if self is Guarantee.EXACTLY_ONCE else "read_uncommitted"

    @property
    def restores_to_checkpoint(self) -> bool:
        """True if restore stops at the checkpointed changelog offset and trims after it."""
        return self is Guarantee.EFFECTIVELY_ONCE

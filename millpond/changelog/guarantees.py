"""Processing guarantees: what each one means for restore, commits and reads.

Every guarantee commits a task's state the same way: one Kafka transaction per task and
commit holds its changelog writes, its checkpoint record and its input offsets (sent with
the consumer group's generation, KIP-447). A process whose membership ended (a long GC
pause, a frozen VM) is fenced twice by the broker: a new owner's ``init_transactions``
bumps the task's producer epoch, and a stale generation makes its offset commit fail. So a
zombie can never make changelog or checkpoint writes visible after the new owner's, and
changelogs and checkpoints are always read ``read_committed``.

The guarantees differ in what they restore and how outputs and inputs are read:

* ``at-least-once``: restore every store to its changelog's committed end.
* ``effectively-once`` (default; Samza's transactional state): restore up to the
  checkpointed changelog offsets, then re-write the current value of every key written
  after them (only records written outside transactions, e.g. by an older millpond, can be
  there), so state reflects each input exactly once; outputs are at-least-once for
  ``read_uncommitted`` readers.
* ``exactly-once``: restore to the changelog's committed end (the last commit), and read
  inputs ``read_committed``, so ``read_committed`` readers of the outputs see each output
  exactly once.
"""

from __future__ import annotations

from enum import StrEnum

# Changelogs and the checkpoint topic are written in transactions: aborted records (a
# crashed or fenced task's uncommitted writes) must never be restored.
STATE_ISOLATION = "read_committed"


class Guarantee(StrEnum):
    """The value of ``task.processing.guarantee``."""

    AT_LEAST_ONCE = "at-least-once"
    EFFECTIVELY_ONCE = "effectively-once"
    EXACTLY_ONCE = "exactly-once"

    @property
    def isolation(self) -> str:
        """The ``isolation.level`` of the job's input consumer."""
        return "read_committed" if self is Guarantee.EXACTLY_ONCE else "read_uncommitted"

    @property
    def restores_to_checkpoint(self) -> bool:
        """True if restore stops at the checkpointed changelog offset and trims after it."""
        return self is Guarantee.EFFECTIVELY_ONCE

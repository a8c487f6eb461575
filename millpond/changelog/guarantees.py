"""Processing guarantees: what each one means for restore, commits and reads.

Every guarantee commits a task's state the same way: one Kafka transaction per task and
commit holds its changelog writes and its checkpoint record, under a ``transactional.id``
of the task's own. Every owner of a task initialises that id before it reads the task's
state, which aborts the previous owner's open transaction and fences its producer, so the
task's transactions are serialized: a process that paused (a long GC, a frozen VM) and
resumes after its task moved either committed before the new owner read the state, and is
part of it, or is refused. Changelogs and the checkpoint topic are therefore always read
``read_committed``.

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

"""What a task does when its input position no longer exists: the input reset policy.

Kafka deletes input by retention (``retention.ms``, ``retention.bytes``) or ``DeleteRecords``
whether a job read it or not. A job that was down, paused or lagging for longer than the
retention comes back to a checkpointed offset below the partition's log start; a partition
whose topic was recreated may have a checkpoint beyond its end. Either way the position is
*out of range*, and ``systems.kafka.consumer.auto.offset.reset`` (Samza's and Kafka's key)
decides what the task does:

* ``earliest`` (or Samza's ``smallest``), the default: resume at the new log start. Only the
  records Kafka already deleted are lost; the default of Kafka Streams, and of Samza for a
  job whose ``samza.offset.default`` is ``oldest`` (what millpond does for a task without a
  checkpoint);
* ``latest`` (``largest``): resume at the partition's end, skipping also the records still
  there;
* ``error`` (``none``): stop the job with one line naming the topic, partition, checkpointed
  offset and log start. Nothing is committed past the checkpoint, so nothing committed is
  lost; the next start stops the same way until the policy or the checkpoint changes.

The same applies when a task opens (:func:`resolve` in :func:`millpond.tasks.opening.
start_positions`) and while it runs: the job's group consumer runs with librdkafka's
``auto.offset.reset=error``, so a fetch that goes out of range comes back as an event the run
loop hands to :func:`resolve` instead of a silent jump. Whatever the policy, each affected
partition gets one WARNING in millpond's log (topic, partition, checkpointed offset, new
offset, records skipped), the task counts the skipped records (the metric
``millpond_input_records_skipped_total``, and the checkpoint, which ``millpond status``
reads), and the task's position moves to the new offset at once, so the next commit moves the
checkpoint and the group's offset there even when nothing follows the gap. A dataflow's
internal topics under ``exactly-once`` always use ``error``: a gap there is lost state.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from millpond.config import Config
from millpond.config.schema import str_default
from millpond.config.values import error as config_error
from millpond.kafka.clients import OFFSET_RESET_SPELLINGS as SPELLINGS
from millpond.tasks.errors import TaskError

log = logging.getLogger("millpond.container")

KEY = "systems.kafka.consumer.auto.offset.reset"
DEFAULT = str_default("systems.<system>.consumer.auto.offset.reset")  # earliest

# Why records were skipped (the metric's ``reason`` label).
DELETED = "deleted"  # removed from Kafka (retention, DeleteRecords) before the task read them
RESET_LATEST = "reset_latest"  # still in Kafka, jumped over by auto.offset.reset=latest


class InputGapError(TaskError):
    """A task's input position is out of range and the policy is ``error``."""


@dataclass(frozen=True)
class Reset:
    """One out-of-range input position and where the task resumes instead."""

    topic: str
    partition: int
    checkpointed: int  # the position the task had (its checkpoint's, or where it had read to)
    new: int  # where it resumes
    low: int  # the partition's log start
    high: int  # its end
    policy: str
    label: str = "checkpointed offset"  # what ``checkpointed`` is (while running: "next offset")
    kind: str = "input"  # or "side input"

    @property
    def deleted(self) -> int:
        """Records the task needed that Kafka deleted first."""
        return max(0, self.low - self.checkpointed) if self.checkpointed < self.low else 0

    @property
    def jumped(self) -> int:
        """Records still in Kafka that the task skips (``latest`` only)."""
        start = self.low if self.checkpointed > self.high else max(self.low, self.checkpointed)
        return max(0, self.new - start)

    @property
    def skipped(self) -> int:
        return self.deleted + self.jumped

    def counts(self) -> dict[str, int]:
        """Skipped records by reason (only the reasons that apply)."""
        return {reason: n for reason, n in ((DELETED, self.deleted),
                                            (RESET_LATEST, self.jumped)) if n}

    def warn(self, when: str) -> None:
        """The one WARNING line of this partition."""
        if self.checkpointed > self.high:
            why = (f"is beyond the partition's end {self.high} (topic recreated or truncated?)")
        else:
            why = (f"was deleted before it was processed (retention or DeleteRecords): the log "
                   f"now starts at {self.low}")
        log.warning(
            "%s %s[%d] %s: the %s %d %s; resuming at offset %d "
            "(auto.offset.reset=%s): %d records skipped (%d deleted, %d still in Kafka); "
            "log start %d, end %d", self.kind, self.topic, self.partition, when, self.label,
            self.checkpointed, why,
            self.new, self.policy, self.skipped, self.deleted, self.jumped, self.low, self.high)


class ResetPolicy:
    """The job's policy for out-of-range input positions, per input topic."""

    def __init__(self, policy: str = DEFAULT, strict: Collection[str] = ()) -> None:
        self.policy = policy
        self.strict = frozenset(strict)  # topics whose gaps are always an error

    @classmethod
    def of(cls, config: Config, internal: Collection[str] = ()) -> ResetPolicy:
        """The policy ``config`` sets (``internal``: a dataflow's internal topics, strict
        under ``exactly-once``)."""
        raw = config.get(KEY)
        value = (raw or DEFAULT).strip().lower()
        if value not in SPELLINGS:
            raise config_error(config.properties, KEY, (
                f"unknown value {raw!r}: what a task does when its checkpointed input offset "
                "no longer exists is one of earliest (or smallest), latest (or largest), "
                "error (or none)"))
        strict = internal if config.job.processing_guarantee == "exactly-once" else ()
        return cls(SPELLINGS[value], strict)

    def of_topic(self, topic: str) -> str:
        return "error" if topic in self.strict else self.policy

    def side_input(self, topic: str, partition: int, offset: int, low: int, high: int,
                   when: str) -> Reset | None:
        """:meth:`resolve` for a side input's position (same policy, named as such)."""
        return self.resolve(topic, partition, offset, low, high, when, kind="side input")

    def resolve(self, topic: str, partition: int, offset: int, low: int, high: int,
                when: str, kind: str = "input") -> Reset | None:
        """Where a task whose position in ``topic[partition]`` is ``offset`` resumes, given
        the partition's ``low`` and ``high`` offsets: None if ``offset`` is in range, else the
        reset (warned about); raises :class:`InputGapError` under ``error``."""
        if low <= offset <= high:
            return None
        policy = self.of_topic(topic)
        label = "checkpointed offset" if when == "at start" else "next offset"
        if policy == "error":
            if offset > high:
                what = f"is beyond the partition's end {high} (topic recreated or truncated?)"
            else:
                what = (f"no longer exists: the log starts at {low}, records {offset}..{low - 1} "
                        "were deleted before they were processed (retention or DeleteRecords)")
            if topic in self.strict:
                internal = (" (an internal topic of the dataflow under exactly-once: its "
                            "gaps are lost state)")
                how = "move the checkpoint with `millpond checkpoint set`"
            else:
                internal = ""
                how = (f"set {KEY}=earliest (skip only the deleted records) or latest, or "
                       "move the checkpoint with `millpond checkpoint set`")
            raise InputGapError(
                f"{kind} {topic}[{partition}] {when}: the {label} {offset} {what}; "
                f"auto.offset.reset={policy}{internal} stops the job, nothing committed is "
                f"lost. To go on, {how}")
        reset = Reset(topic, partition, offset, low if policy == "earliest" else high, low,
                      high, policy, label, kind)
        reset.warn(when)
        return reset

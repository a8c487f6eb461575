"""One running task: a user StreamTask bound to one input partition and its stores."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message

from millpond.api import IncomingMessageEnvelope, SerdePair, StreamTask, TaskCoordinator
from millpond.changelog.checkpoint import Checkpoint, task_name
from millpond.errors import MillpondError
from millpond.kafka.errors import OutputTopicError, ProducerFencedError, TransactionAbortedError
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import input_lag
from millpond.metrics.histogram import DurationHistogram
from millpond.sideinputs.reader import SideInputReader
from millpond.tasks.collector import KafkaCollector
from millpond.tasks.input_reset import Reset
from millpond.tasks.storage import CheckpointBudget, TaskStorage

log = logging.getLogger("millpond.container")

# Raised by the task's producer when the task can no longer commit (fenced, aborted).
TASK_MOVED = (ProducerFencedError, TransactionAbortedError)
# Raised from process() but not the message's fault: never dead-lettered or skipped.
NOT_THE_MESSAGE = (*TASK_MOVED, OutputTopicError)
# Raised from a task's init(), window() or close() by millpond or Kafka, not by the user's own
# code: kept as they are (the others become one UserCodeError line).
NOT_USER_CODE = (MillpondError, KafkaException, *NOT_THE_MESSAGE)

# (stage, message, exception, store writes undone) -> True to skip the message, or raise.
ErrorPolicy = Callable[[str, Message, BaseException, int], bool]


@dataclass
class TaskMetrics:
    """Per-task counters the container reports."""

    processed: int = 0
    skipped: int = 0
    process_ns: int = 0
    commits: int = 0
    commit_s: float = 0.0
    restored_records: int = 0
    restore_s: float = 0.0
    commit_seconds: DurationHistogram = field(default_factory=DurationHistogram)
    last_commit_time: float | None = None  # unix time of the last commit
    # (input topic, reason) -> records skipped because the task's position there no longer
    # existed (millpond.tasks.input_reset), by this instance
    input_skipped: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def process_latency_us(self) -> float:
        return self.process_ns / 1000 / self.processed if self.processed else 0.0


@dataclass
class TaskInstance:
    """The user task of one partition, with its storage, producer and input positions."""

    partition: int
    task: StreamTask
    storage: TaskStorage
    producer: TrackedProducer
    collector: KafkaCollector
    next_offsets: dict[str, int]  # input topic -> next offset to process
    side_inputs: SideInputReader | None = None  # the task's side-input stores, if any
    coordinator: TaskCoordinator = field(default_factory=TaskCoordinator)
    metrics: TaskMetrics = field(default_factory=TaskMetrics)
    last_window: float = field(default_factory=time.monotonic)
    # input topic -> records skipped over the task's life (from its checkpoint, plus this
    # instance's resets); committed with the checkpoint for `millpond status`
    skipped_inputs: dict[str, int] = field(default_factory=dict)
    # input topic -> the partition's end when the task opened: its lag (metrics, status)
    # until the consumer's first fetch there brings the consumer's cached watermarks
    input_ends: dict[str, int] = field(default_factory=dict)
    # input topic -> next offset as of the task's last commit (at open: where it resumed);
    # the crash points tell a commit that moves input from one that does not
    committed_offsets: dict[str, int] = field(default_factory=dict)
    # its stores as live queries read them (millpond.tasks.queries): made at the first query
    # and again after a commit, kept here so that they go when the task does
    query_views: object | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.committed_offsets:
            self.committed_offsets = dict(self.next_offsets)

    @property
    def name(self) -> str:
        return task_name(self.partition)

    def lag(self, consumer: Consumer, inputs: list[str]) -> dict[str, int]:
        """Messages behind per input: from the consumer's cached watermarks, else (before
        its first fetch of a just-opened task's partition) from the end read at open."""
        lag = input_lag(consumer, inputs, self.partition, self.next_offsets)
        for topic, end in self.input_ends.items():
            if topic not in lag and end >= 0:
                lag[topic] = max(0, end - self.next_offsets.get(topic, 0))
        return lag

    def handle_batch(
        self, msgs: list[Message], serdes_of: Callable[[str], SerdePair],
        on_error: ErrorPolicy,
    ) -> int:
        """Process ``msgs`` (this task's, in offset order) and advance the input positions.

        Stops early when the task asks for a commit or shutdown; returns how many
        messages were consumed so the container can act and resume after them. A message
        the error policy skips after process() failed has its store writes undone.
        """
        # A task that runs records without envelopes (a dataflow: its fused operator chains)
        # is called with (key, value) alone.
        fused = getattr(self.task, "fused_steps", None)
        steps = fused(self.collector) if fused is not None else None
        metrics = self.metrics
        began = time.perf_counter_ns()
        journal = self.storage.journal
        # each record's store writes, undone if the policy skips it; a policy that cannot skip
        # a failed process() (no task.dlq.stream) stops the job instead: nothing to journal
        entries = journal.start() if getattr(on_error, "skips_process", True) else []
        try:
            done, handled = self._run(msgs, serdes_of, on_error, self.task.process, steps,
                                      entries)
        finally:
            journal.stop()
        metrics.process_ns += time.perf_counter_ns() - began
        metrics.processed += handled
        return done

    def _run(
        self, msgs: list[Message], serdes_of: Callable[[str], SerdePair], on_error: ErrorPolicy,
        process: Callable[..., None], steps: Any, entries: list[Any],
    ) -> tuple[int, int]:
        """handle_batch's loop: (messages consumed, messages handled)."""
        collector, coordinator = self.collector, self.coordinator
        # a task that keeps state in memory beside its stores puts it back on a skip
        undo_record = getattr(self.task, "undo_record", None)
        next_offsets, partition, metrics = self.next_offsets, self.partition, self.metrics
        last_topic: str | None = None
        key_serde = msg_serde = None
        handled = done = 0
        for msg in msgs:
            done += 1
            topic: str = msg.topic()  # type: ignore[assignment]
            offset: int = msg.offset()  # type: ignore[assignment]
            if offset < next_offsets.get(topic, 0):
                continue  # fetched before the seek to the checkpoint
            if topic != last_topic:
                key_serde, msg_serde = serdes_of(topic)
                last_topic = topic
            try:
                key = msg.key()
                if key is not None and key_serde is not None:
                    key = key_serde.from_bytes(key)
                value = msg.value()
                if value is not None and msg_serde is not None:
                    value = msg_serde.from_bytes(value)
            except Exception as exc:
                on_error("deserialization", msg, exc, 0)  # raises unless skipping
                metrics.skipped += 1
                next_offsets[topic] = offset + 1
                continue
            try:
                if steps is not None:
                    steps[topic](key, value, msg.timestamp()[1])
                else:
                    process(IncomingMessageEnvelope(
                        topic, partition, offset, key, value, msg.timestamp()[1],
                        msg.headers() or (),  # type: ignore[arg-type]
                    ), collector, coordinator)
            except NOT_THE_MESSAGE:
                raise  # a moved task is closed and reopened; a missing output stops the job
            except Exception as exc:
                if getattr(exc, "not_the_message", False):
                    raise  # e.g. a timer that fired after the message: the job stops
                # a skipped record is skipped whole: its store writes are undone first, and
                # what the task keeps in memory beside them (a dataflow's stream time)
                undone = self.storage.journal.undo()
                if undo_record is not None:
                    undo_record()
                on_error("process", msg, exc, undone)  # raises unless skipping
                metrics.skipped += 1
            if entries:
                entries.clear()  # the record succeeded: its writes stay
            handled += 1
            next_offsets[topic] = offset + 1
            if coordinator.commit_requested or coordinator.shutdown_requested:
                break
        return done, handled

    def apply_reset(self, reset: Reset) -> None:
        """An input position was out of range: resume at ``reset.new`` and count the skipped
        records. The next commit writes the new position even if no record follows."""
        self.next_offsets[reset.topic] = reset.new
        for reason, n in reset.counts().items():
            key = (reset.topic, reason)
            self.metrics.input_skipped[key] = self.metrics.input_skipped.get(key, 0) + n
        if reset.skipped:
            self.skipped_inputs[reset.topic] = (self.skipped_inputs.get(reset.topic, 0)
                                                + reset.skipped)

    def checkpoint(self) -> Checkpoint:
        """This task's position now (after :meth:`TaskStorage.record_delivered`)."""
        return Checkpoint(self.name, self.partition, dict(self.next_offsets),
                          self.storage.changelog_offsets(),
                          self.side_inputs.offsets() if self.side_inputs is not None else {},
                          dict(self.storage.topics), self.skipped_totals())

    def skipped_totals(self) -> dict[str, int]:
        """topic -> records skipped over the task's life: its checkpoint's, this instance's
        input resets and its side inputs' (what the checkpoint carries on)."""
        out = dict(self.skipped_inputs)
        if self.side_inputs is not None:
            for topic, n in self.side_inputs.skipped_totals().items():
                out[topic] = out.get(topic, 0) + n
        return out

    def after_commit(self, final: bool = False, budget: CheckpointBudget | None = None) -> None:
        """The commit happened: checkpoint the local store directories that are due within
        the commit's ``budget`` (every store's if ``final``: the task stops or moves)."""
        self.storage.after_commit(final, budget)
        if self.side_inputs is not None:
            self.side_inputs.after_commit()

    def checkpoint_local(self, budget: CheckpointBudget) -> None:
        """A pipelined commit's part of :meth:`after_commit` on its commit thread: the
        stores' local checkpoints that are due; :meth:`committed` does the rest."""
        self.storage.after_commit(False, budget, mark=False)

    def committed(self) -> None:
        """The rest of :meth:`after_commit` after :meth:`checkpoint_local`, on the run
        loop's thread: the committed-reads snapshots, the side inputs' local offsets."""
        self.storage.mark_committed()
        if self.side_inputs is not None:
            self.side_inputs.after_commit()

    def close_storage(self) -> None:
        """Close the side-input reader and the stores (no commit)."""
        try:
            if self.side_inputs is not None:
                self.side_inputs.close()
        finally:
            self.storage.close()


def log_task_summary(t: TaskInstance) -> None:
    """One line of a task's counters, logged at shutdown."""
    m = t.metrics
    log.info("task %s: processed %d, skipped %d, process %.1f us/msg, %d commits "
             "(%.1f ms avg), restored %d records in %.2fs", t.name, m.processed,
             m.skipped, m.process_latency_us, m.commits,
             1000 * m.commit_s / m.commits if m.commits else 0.0,
             m.restored_records, m.restore_s)

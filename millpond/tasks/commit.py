"""The commit protocol: how a task's state, outputs and input positions become durable.

Every task commits through its own Kafka transaction, in these phases (each task is
carried through a phase before any task enters the next, so producers flush in parallel):

1. ``flush``: stores write their dirty entries down (engine + changelog records);
2. ``deliver``: wait until every record of the transaction is acknowledged (a delivery
   error stops the job before anything is committed), then note the last changelog
   offsets (read from the partitions' ends for every task at once: millpond.kafka.ends);
3. ``checkpoint``: the checkpoint record (next input offsets, last changelog offsets) goes
   to the task's partition of the checkpoint topic, inside the transaction;
4. ``txn``: the transaction commits (the tasks' transactions side by side, on up to
   COMMIT_THREADS threads: each waits for its coordinator's answer);
5. ``local``: each store's directory is checkpointed (RocksDB checkpoint + OFFSET file);
6. a new transaction begins; the input offsets are committed to the consumer group (async,
   for lag tools only: the checkpoint topic is what a task resumes from).

The fence is the task's ``transactional.id``: every owner initialises it before it reads
the task's state, which aborts the previous owner's open transaction and bumps the epoch,
so the task's transactions are serialized: a paused process's transaction either committed
before the new owner read the state (and is part of it) or is refused. The offsets are not
sent into the transaction: ``send_offsets_to_transaction`` can block past its timeout while
the group coordinator moves (librdkafka issues 5456 and 5511), and the epoch fence does not
need the generation check it adds.

A turn's commit (millpond.tasks.turns: while the loop keeps up) is pipelined instead:
:meth:`CommitProtocol.start` writes the task's stores down on the run loop's thread and
hands phases 2-5 to a commit thread, and the loop handles the other tasks' records until
:meth:`CommitProtocol.finish` completes it (begin, offsets); the task itself waits. The
steps, their order and the crash points are the same.

A task whose producer was fenced, or whose transaction was aborted, is reported back as
failed (nothing of its transaction is visible); the caller closes it without committing.
``MILLPOND_CRASH_AT`` crash points follow each task's step of each phase (see
:mod:`millpond.tasks.faults`).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import pairwise

from confluent_kafka import Consumer, KafkaException, TopicPartition

from millpond.kafka.errors import ProducerFencedError, TransactionAbortedError
from millpond.kafka.producer import resolve_together
from millpond.tasks.faults import abort_point, crash_point, input_committed
from millpond.tasks.instance import TaskInstance
from millpond.tasks.storage import CheckpointBudget

log = logging.getLogger("millpond.container")
# Threads that commit the transactions of one commit's tasks side by side (each waits for its
# transaction coordinator with the GIL released); more tasks take turns.
COMMIT_THREADS = 8
phases_log = logging.getLogger("millpond.commit")  # each commit's phase times (DEBUG)


@dataclass
class CommitFailure:
    """A task whose commit did not happen, and why."""

    task: TaskInstance
    error: Exception

    @property
    def hold(self) -> bool:
        """True if the task should reopen only after the next rebalance (or a short hold):
        its producer was fenced (the task may belong to another process now), or a
        coordinator did not answer."""
        return isinstance(self.error, ProducerFencedError) or getattr(
            self.error, "unavailable", False)


@dataclass
class PendingCommit:
    """A task's commit that :meth:`CommitProtocol.start` began: its stores are written down
    (at ``flushed``), the rest runs on a commit thread (``future``)."""

    task: TaskInstance
    began: float  # monotonic
    flushed: float
    future: Future[CommitFailure | None]

    @property
    def done(self) -> bool:
        """The commit thread's part is over (:meth:`CommitProtocol.finish` will not wait)."""
        return self.future.done()


def _attempt(t: TaskInstance, call: Callable[[], None]) -> CommitFailure | None:
    """``call()`` for ``t``; the failure (``t`` out of the commit) on a fence or abort."""
    try:
        call()
    except (ProducerFencedError, TransactionAbortedError) as exc:
        return CommitFailure(t, exc)
    except KafkaException as exc:  # an injected abort (MILLPOND_ABORT_AT)
        if not exc.args[0].txn_requires_abort():
            raise
        return CommitFailure(t, TransactionAbortedError(str(exc)))
    return None


class CommitProtocol:
    """Commits tasks through per-task transactions, fenced by the tasks' transactional ids."""

    def __init__(self, consumer: Consumer, checkpoint_topic: str) -> None:
        self.consumer = consumer
        self.checkpoint_topic = checkpoint_topic
        self._pool: ThreadPoolExecutor | None = None  # made when a commit first needs one

    def commit(self, tasks: list[TaskInstance], final: bool = False) -> list[CommitFailure]:
        """Commit ``tasks``; return those that failed as ordinary events (fenced, aborted).
        ``final``: the tasks stop or move after it, so every store is checkpointed locally
        (see :meth:`millpond.tasks.storage.TaskStorage.after_commit`)."""
        failures: list[CommitFailure] = []
        live = list(tasks)
        began = time.monotonic()
        times: list[float] = []  # each phase's end (monotonic), for the debug line

        def attempt(t: TaskInstance, call: Callable[[], None]) -> bool:
            """``call()`` for ``t``; False (t failed, out of the commit) on a fence or abort."""
            failure = _attempt(t, call)
            if failure is not None:
                live.remove(t)
                failures.append(failure)
            return failure is None

        def phase(step: Callable[[TaskInstance], None], point: str | None = None) -> None:
            for t in list(live):
                if attempt(t, partial(step, t)) and point is not None:
                    # once per task, as a crash between tasks is possible
                    crash_point(point, t.name, t.committed_offsets, t.next_offsets)
            times.append(time.monotonic())

        phase(lambda t: None, "before-flush")
        phase(self._flush, "after-flush")
        phase(self._deliver)
        resolve_together([t.producer for t in live])  # the changelogs' ends, one request
        phase(self._record_delivered, "after-changelog-delivered")
        phase(self._checkpoint, "after-checkpoint-topic")
        # The transactions commit side by side: each commit_transaction waits (GIL released)
        # for its coordinator's answer, so the phase takes the slowest, not the sum.
        together = len(live) > 1
        started = [(t, self._start_commit(t, together)) for t in list(live)
                   if attempt(t, abort_point)]
        for t, done in started:
            if attempt(t, partial(self._committed, t, done)):
                crash_point("after-transaction-commit", t.name, t.committed_offsets,
                            t.next_offsets)
        times.append(time.monotonic())
        budget = CheckpointBudget()  # one store's local checkpoint per commit, unless overdue
        phase(lambda t: t.after_commit(final, budget), "after-local-checkpoint")
        phase(self._begin)
        for t in live:
            t.committed_offsets = dict(t.next_offsets)
        self._commit_offsets(live)
        elapsed = time.monotonic() - began
        if phases_log.isEnabledFor(logging.DEBUG):
            ms = [1000 * (b - a) for a, b in pairwise([began, *times])]
            phases_log.debug("commit of %d task(s) in %.1f ms: flush %.1f, deliver %.1f, ends "
                             "%.1f, checkpoint %.1f, txn %.1f, local %.1f, begin %.1f",
                             len(tasks), 1000 * elapsed, *ms[1:])
        self._counted(live, elapsed)
        return failures

    # ---- one task's commit, pipelined -------------------------------------------------
    def start(self, t: TaskInstance) -> PendingCommit | CommitFailure:
        """Start committing ``t`` without waiting for Kafka: its stores write down on this
        thread (the phases' ``flush``), then delivery, the changelog ends, the checkpoint
        record, the transaction's commit and the local checkpoint go on a commit thread
        while the caller carries on with other tasks; :meth:`finish` completes it. The same
        steps and crash points as :meth:`commit`, in the same order. Until ``finish`` the
        caller leaves ``t`` alone (no records, ``window()``, writes or close): its producer
        and transaction belong to the commit thread. A failed flush returns the failure."""
        began = time.monotonic()
        crash_point("before-flush", t.name, t.committed_offsets, t.next_offsets)
        failure = _attempt(t, partial(self._flush, t))
        if failure is not None:
            return failure
        crash_point("after-flush", t.name, t.committed_offsets, t.next_offsets)
        return PendingCommit(t, began, time.monotonic(), self._threads().submit(self._remote, t))

    def _remote(self, t: TaskInstance) -> CommitFailure | None:
        """The part of ``t``'s commit that waits for Kafka (on a commit thread)."""
        steps: list[tuple[Callable[[TaskInstance], None], str | None]] = [
            (self._deliver, None), (self._record_delivered, "after-changelog-delivered"),
            (self._checkpoint, "after-checkpoint-topic"), (lambda _: abort_point(), None),
            (partial(self._committed, started=None), "after-transaction-commit"),
            (lambda t: t.checkpoint_local(CheckpointBudget()), "after-local-checkpoint")]
        try:
            for step, point in steps:
                failure = _attempt(t, partial(step, t))
                if failure is not None:
                    return failure
                if point is not None:
                    crash_point(point, t.name, t.committed_offsets, t.next_offsets)
        except BaseException:
            raise  # the future holds it: finish() raises it on the loop
        except:  # noqa: E722 - not an exception class: it would end the thread, not the future
            return CommitFailure(t, TransactionAbortedError(
                f"task {t.name}: its commit thread got {sys.exc_info()[1]!r}"))
        return None

    def finish(self, pending: PendingCommit) -> CommitFailure | None:
        """Complete a commit :meth:`start` began (waiting for its thread if it is still
        working; what it raised is raised here): the committed-reads snapshots, the next
        transaction, the committed offsets. The failure, if the commit failed."""
        t = pending.task
        failure = pending.future.result()
        if failure is not None:
            return failure
        remote = time.monotonic()
        t.committed()
        failure = _attempt(t, partial(self._begin, t))
        if failure is not None:
            return failure
        t.committed_offsets = dict(t.next_offsets)
        self._commit_offsets([t])
        done = time.monotonic()
        elapsed = done - pending.began
        if phases_log.isEnabledFor(logging.DEBUG):
            phases_log.debug("pipelined commit of task %s in %.1f ms: flush %.1f, on the commit "
                             "thread %.1f (local checkpoint included), then %.1f", t.name,
                             1000 * elapsed, 1000 * (pending.flushed - pending.began),
                             1000 * (remote - pending.flushed), 1000 * (done - remote))
        self._counted([t], elapsed)
        return None

    @staticmethod
    def _counted(tasks: list[TaskInstance], elapsed: float) -> None:
        """Count a commit of ``tasks`` that took ``elapsed`` seconds in their metrics."""
        now = time.time()
        for t in tasks:
            t.metrics.commits += 1
            t.metrics.commit_s += elapsed
            t.metrics.commit_seconds.observe(elapsed)
            t.metrics.last_commit_time = now
            t.coordinator.commit_requested = False

    @staticmethod
    def _flush(t: TaskInstance) -> None:
        t.storage.flush()

    @staticmethod
    def _deliver(t: TaskInstance) -> None:
        t.producer.flush_and_check()

    @staticmethod
    def _record_delivered(t: TaskInstance) -> None:
        t.storage.record_delivered(t.producer)

    def _checkpoint(self, t: TaskInstance) -> None:
        t.producer.send(self.checkpoint_topic, t.partition, t.name.encode(),
                        t.checkpoint().to_bytes())

    def _start_commit(self, t: TaskInstance, together: bool) -> Future[None] | None:
        """Start committing ``t``'s transaction on a commit thread when other tasks commit
        with it (None: alone, it commits on this thread in :meth:`_committed`). Each task's
        producer is used by one thread at a time: this one waits meanwhile."""
        if not together:
            return None
        return self._threads().submit(t.producer.commit_transaction)

    def _threads(self) -> ThreadPoolExecutor:
        """The commit threads, made when first needed."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(COMMIT_THREADS, thread_name_prefix="millpond-commit")
        return self._pool

    @staticmethod
    def _committed(t: TaskInstance, started: Future[None] | None) -> None:
        """Wait for ``t``'s transaction to commit (raising what the commit raised)."""
        if started is None:
            t.producer.commit_transaction()
        else:
            started.result()
        if t.next_offsets != t.committed_offsets:
            input_committed()

    def _commit_offsets(self, tasks: list[TaskInstance]) -> None:
        """Tell the group how far the tasks got (monitoring only; failures are harmless)."""
        offsets = [TopicPartition(topic, t.partition, off)
                   for t in tasks for topic, off in t.next_offsets.items()]
        if offsets:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            except KafkaException as exc:
                log.debug("committing offsets to the group failed: %s", exc)

    @staticmethod
    def _begin(t: TaskInstance) -> None:
        t.producer.begin_transaction()

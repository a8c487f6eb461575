"""The task manager: opens, commits, closes and reopens this process's tasks.

Between the run loop and the tasks. The run loop polls and dispatches, and tells the
manager when to open tasks (a time slice per iteration), commit, or give up on a task whose
transaction failed; the group's rebalance callbacks (:mod:`millpond.tasks.membership`) tell
it what was assigned, revoked or lost. The manager never calls back into either.

A task whose commit fails as an ordinary event (fenced by a new owner, refused by the
group, aborted) is closed without committing and reopened after the next rebalance if it
is still ours: a paused process that resumes cannot make its writes visible.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from millpond.kafka.wake import FetcherWake
from millpond.tasks.commit import CommitFailure, CommitProtocol, PendingCommit
from millpond.tasks.errors import UserCodeError
from millpond.tasks.instance import NOT_USER_CODE, TaskInstance, log_task_summary
from millpond.tasks.opening import RETRY_S, TaskOpener, unreachable
from millpond.tasks.startup import StartupTimeline
from millpond.tasks.telemetry import RuntimeMetrics

log = logging.getLogger("millpond.container")


def fetch_from(consumer: Consumer, tps: list[TopicPartition]) -> None:
    """Fetch ``tps`` from their offsets: assigned anew, not seek + resume of paused partitions
    (librdkafka's first fetch after that came ~1 s later in most runs, 0.1 s this way; the
    run loop's re-assign after an out-of-range fetch works the same way), and resumed (the
    pause may outlive the assignment). A task's start, and a stalled fetch's restart
    (millpond.tasks.stalls)."""
    consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition) for tp in tps])
    consumer.incremental_assign(tps)
    consumer.resume(tps)


class TaskManager:
    """The lifecycle of the tasks held here: ``tasks`` maps partition -> open task (the
    manager is its only writer; metrics read it)."""

    def __init__(
        self, tasks: dict[int, TaskInstance], consumer: Consumer, opener: TaskOpener,
        committer: CommitProtocol, inputs: list[str], metrics: RuntimeMetrics | None = None,
    ) -> None:
        self.tasks = tasks
        self.consumer = consumer
        self.opener = opener
        self.committer = committer
        self.inputs = inputs
        self.metrics = metrics
        self._revoking: set[int] = set()  # revoked in a poll's callback, not yet committed
        self._pending: dict[int, PendingCommit] = {}  # partition -> its pipelined commit
        # When the consumer began (re)joining its group without an assignment since: at
        # subscribe, when its partitions were lost; None once the group assigned it any.
        self.joining_since: float | None = time.monotonic()
        self.startup: StartupTimeline | None = None  # the container's (it logs once)
        # After each rebalance, the tasks that stayed have their fetchers woken (see
        # millpond.kafka.wake); settled before the consumer it uses is closed.
        self.wake = FetcherWake()

    def inputs_of(self, partitions: list[int]) -> list[TopicPartition]:
        """Every input partition of the given tasks. The offset is explicit: a task seeks to
        its checkpoint when it opens, so the group's committed (transactional, possibly
        pending) offsets are never looked up."""
        return [TopicPartition(t, p, OFFSET_BEGINNING) for p in partitions for t in self.inputs]

    # ---- the group's decisions ----------------------------------------------------------
    def assigned(self, partitions: list[int]) -> None:
        """Record and pause newly assigned partitions; their tasks open in the run loop."""
        if self._revoking.intersection(partitions):  # back within one poll: hand over first
            self.finish_revocations()
        self.joining_since = None
        tps = self.inputs_of(partitions)
        self.consumer.incremental_assign(tps)
        self.consumer.pause(tps)
        # The last callback of every rebalance (with [] when only revoked): librdkafka has
        # just resumed the partitions it paused for the callbacks, the open tasks' included.
        self.wake.wake(self.consumer, self.inputs_of(sorted(self.tasks)))
        for p in partitions:
            self.opener.add(p)
        self.opener.release_holds()
        log.info("assigned partitions %s", partitions)
        if self.startup is not None:
            self.startup.mark_once("joining the group (partitions assigned)")

    def revoked(self, partitions: list[int]) -> None:
        """Stop fetching the revoked partitions; their tasks commit and close once the poll
        that ran this callback returns (:meth:`finish_revocations`), not inside it.

        librdkafka (2.16, cooperative-sticky) pauses every assigned partition while a
        revocation callback runs; when the callback took more than ~1-2 ms, the partitions
        that stay were not fetched again for ~0.6 s after it (the fetcher misses their
        resume), so a commit here stalled the tasks that did not move. The new owner gets
        the partitions only after another round of the rebalance, and fences this process's
        producer before it reads the state: a commit that comes after that fails and the
        new owner resumes from the commit before (as after a crash)."""
        log.info("revoking partitions %s", partitions)
        self.consumer.incremental_unassign(self.inputs_of(partitions))
        self._revoking.update(partitions)

    def finish_revocations(self) -> None:
        """Commit the tasks revoked by the last poll's callbacks (their final commit), then
        close them and drop openings of their partitions. The run loop calls it as soon as
        each poll returns, before anything is dispatched."""
        if not self._revoking:
            return
        partitions = sorted(self._revoking)
        self._revoking.clear()
        self.settle()  # pipelined commits first (a failed one closes its task)
        ready = [self.tasks[p] for p in partitions if p in self.tasks]
        for failure in self._commit(ready, final=True):  # closed below all the same
            log.warning("task %s: its commit before the hand-over failed, the new owner "
                        "resumes from its commit before (%s)", failure.task.name,
                        failure.error)
        self._close_all(partitions)

    def lost(self, partitions: list[int]) -> None:
        """Let lost tasks go without committing (another member owns them now)."""
        log.warning("partitions %s were lost to another member; closing without commit",
                    partitions)
        self._revoking.difference_update(partitions)
        self.joining_since = time.monotonic()  # librdkafka rejoins the group by itself
        self._close_all(partitions)
        self.consumer.incremental_unassign(self.inputs_of(partitions))

    def _close_all(self, partitions: list[int]) -> None:
        for p in partitions:
            self.opener.drop(p)
            self.close(p)
        self.opener.release_holds()

    # ---- the run loop's requests --------------------------------------------------------
    def open_some(self, budget_s: float) -> list[TaskInstance]:
        """Advance openings for about ``budget_s`` seconds; start each task that is ready
        and return those still open (a trimmed restore's first commit may fail)."""
        started = []
        for instance in self.opener.step(budget_s):
            self.tasks[instance.partition] = instance
            if self._start(instance):
                started.append(instance)
        if started and self.startup is not None and not self.opener.pending:
            self.startup.ready(len(self.tasks))  # logs once: the first assignment's
        return started

    def _start(self, instance: TaskInstance) -> bool:
        """A task finished opening: commit a trimmed restore at once, then start its input."""
        if instance.storage.trimmed:
            self.commit([instance])  # make the trimmed state the committed one at once
            if instance.partition not in self.tasks:
                return False
        fetch_from(self.consumer, [TopicPartition(t, instance.partition, instance.next_offsets[t])
                                   for t in self.inputs])
        log.info("task %s ready: restored %d records in %.1fs, input offsets %s",
                 instance.name, instance.metrics.restored_records, instance.metrics.restore_s,
                 instance.next_offsets)
        return True

    def commit(self, tasks: list[TaskInstance] | None = None, final: bool = False) -> None:
        """Commit ``tasks`` (default: all open); close the ones that failed, reopen later.
        ``final``: the tasks stop or move after it (their stores are checkpointed locally)."""
        self.settle()  # pipelined commits first (a failed one closes its task)
        tasks = list(self.tasks.values()) if tasks is None else tasks
        for failure in self._commit(tasks, final):
            self.failed(failure)

    def start_commit(self, tasks: list[TaskInstance]) -> None:
        """Start pipelined commits of ``tasks`` (:meth:`CommitProtocol.start`): each is
        :meth:`committing` until :meth:`settle` completes it; a failed one is closed."""
        for t in tasks:
            self.settle(t.partition)  # one commit of a task at a time
            started = self.committer.start(t)
            if isinstance(started, CommitFailure):
                self.failed(started)
            else:
                self._pending[t.partition] = started

    def committing(self, partition: int) -> bool:
        """The task of ``partition`` has a pipelined commit under way: leave it alone."""
        return partition in self._pending

    def all_committing(self) -> bool:
        """Every open task has a pipelined commit under way (none can take records)."""
        return bool(self._pending) and all(p in self._pending for p in self.tasks)

    def await_a_commit(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until one pipelined commit's thread is done."""
        if self._pending:
            futures.wait([c.future for c in self._pending.values()], timeout=timeout_s,
                         return_when=futures.FIRST_COMPLETED)

    def settle(self, partition: int | None = None, wait: bool = True) -> None:
        """Complete pipelined commits: that of ``partition`` (default: every one), waiting
        for them (``wait``) or only those whose commit thread is done. A failed one's task
        is closed and reopens from its checkpoint, as at any commit."""
        chosen = list(self._pending) if partition is None else [partition]
        for p in chosen:
            pending = self._pending.get(p)
            if pending is None or not (wait or pending.done):
                continue
            failure = self._finish(p)
            if failure is not None:
                self.failed(failure)

    def _finish(self, partition: int) -> CommitFailure | None:
        """Complete the pipelined commit of ``partition``'s task, if one is under way."""
        pending = self._pending.pop(partition, None)
        if pending is None:
            return None
        failure = self.committer.finish(pending)
        if failure is None:
            self.opener.outage.available()
        return failure

    def _commit(self, tasks: list[TaskInstance], final: bool) -> list[CommitFailure]:
        """Commit ``tasks`` (Kafka answered if any of them committed); the failures."""
        if not tasks:
            return []
        failures = self.committer.commit(tasks, final)
        if len(failures) < len(tasks):
            self.opener.outage.available()
        return failures

    def failed(self, failure: CommitFailure) -> None:
        """``failure.task`` cannot commit (fenced, aborted): close it without committing and
        open it again from its checkpoint (after the next rebalance when it may have moved;
        as soon as Kafka answers when it was unreachable)."""
        t = failure.task
        away = unreachable(failure.error)
        if away:
            hold = RETRY_S
            last = t.metrics.last_commit_time  # the outage began after it, at the latest
            self.opener.outage.unavailable(
                f"task {t.name} aborted and will replay from its last commit: {failure.error}",
                ago_s=time.time() - last if last is not None else 0.0)
        else:
            hold = self.opener.hold_s if failure.hold else 0.0
            log.warning("transaction of task %s aborted, nothing of it is visible (%s); "
                        "restoring it from the checkpoint%s", t.name, failure.error,
                        " after the next rebalance" if hold else "")
        # Kafka away: no abort (it would wait for it); the next open's init_transactions
        # aborts the transaction anyway.
        self.close(t.partition, abort=not away)
        self.consumer.pause(self.inputs_of([t.partition]))
        self.opener.add(t.partition, hold)

    def close(self, partition: int, abort: bool = True) -> None:
        """Close a task without committing: its open transaction (empty right after a
        commit) is aborted (``abort``; else left to the next owner's ``init_transactions``),
        its stores are closed as they are (the next open recovers them from the last
        commit). While Kafka is away there is no abort: it would wait out its timeout (5 s a
        task, inside a rebalance callback, holding up the group's rebalance once Kafka is
        back), and the next owner's ``init_transactions`` aborts the transaction anyway."""
        failure = self._finish(partition)  # a pipelined commit ends first (it may commit)
        if failure is not None:
            log.warning("task %s: its commit failed as it closed (%s)", failure.task.name,
                        failure.error)
            if unreachable(failure.error):
                abort = False
        if self.opener.outage.since is not None:
            abort = False
        instance = self.tasks.pop(partition, None)
        if instance is None:
            return
        if self.metrics is not None:
            self.metrics.retire(instance)  # its counters outlive it
        try:
            try:
                instance.task.close()
            except NOT_USER_CODE:
                raise
            except Exception as exc:  # the user's code: one line naming its frame
                raise UserCodeError(instance.task, "close", exc) from exc
        finally:
            instance.close_storage()
            if abort:
                instance.producer.abort_transaction(5)
            instance.producer.discard()

    def replace_consumer(self, consumer: Consumer) -> None:
        """The group consumer failed for good: close every task without committing (its
        partitions were lost with the membership) and carry on with ``consumer``."""
        self.opener.close()
        self._revoking.clear()
        self.wake.settle()
        for p in list(self.tasks):
            self.close(p, abort=False)
        self.consumer = consumer
        self.committer.consumer = consumer
        self.joining_since = time.monotonic()

    def shutdown(self) -> None:
        """Log each task's summary, abandon openings and close every task (no commit)."""
        for t in self.tasks.values():
            log_task_summary(t)
        self.wake.close()
        self.opener.close()
        for p in list(self.tasks):
            self.close(p)

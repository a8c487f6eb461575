"""The run loop: poll, open pending tasks a step at a time, dispatch, window, commit.

One iteration: poll a batch from the group consumer (serving rebalance callbacks), give the
task manager a bounded slice of time to open tasks, hand each partition's messages to its
task, call ``window()`` on schedule, have the manager commit every ``task.commit.ms`` (and a
task that asks, after the message or the ``window()`` call that asked), and end when asked
to stop or, in bounded runs, when every input partition is at its end. Opening, committing,
closing and reopening tasks is the manager's (:mod:`millpond.tasks.manager`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from millpond.api import SerdePair
from millpond.kafka.errors import KafkaClientError
from millpond.kafka.faults import ClientFaults
from millpond.kafka.outage import LIMITER, suffix
from millpond.kafka.reading import log_end_offsets, watermarks
from millpond.tasks.commit import CommitFailure
from millpond.tasks.errors import UserCodeError
from millpond.tasks.faults import crash_point, stall_fetch
from millpond.tasks.input_reset import ResetPolicy
from millpond.tasks.instance import NOT_USER_CODE, TASK_MOVED, ErrorPolicy, TaskInstance
from millpond.tasks.manager import TaskManager
from millpond.tasks.memory import MemoryWatch
from millpond.tasks.purge import InternalTopicPurger
from millpond.tasks.stalls import StallWatch
from millpond.tasks.turns import CommitTurns
from millpond.tasks.writeahead import WriteAhead

if TYPE_CHECKING:
    from millpond.query import Directory, Mailbox
    from millpond.tasks.telemetry import RuntimeMetrics

log = logging.getLogger("millpond.container")

POLL_BATCH = 1000
POLL_TIMEOUT_S = 0.1
# With live queries on, an idle loop's wait for input is shorter: the loop answers the
# queries between polls, so this is how long a query to an idle job can wait.
QUERY_POLL_TIMEOUT_S = 0.01
OPEN_BUDGET_S = 0.2  # time given to opening tasks (restore batches) per iteration
# ... while other tasks run: their records wait at most about this (and one step) for it
OPEN_SLICE_S = 0.01
# Records held for a task while its pipelined commit is under way, at most: past this the
# loop waits for the commit (a coordinator slow to answer must not grow memory unbounded).
HELD_MAX = 10 * POLL_BATCH
HELD_MAX_BYTES = 4 << 20  # and at most this many bytes of values (4 KB records: 1,000)


@dataclass
class _Held:
    """Records polled for a task whose pipelined commit is under way, in order, and their
    values' bytes (both bounded: HELD_MAX, HELD_MAX_BYTES)."""

    task: TaskInstance
    records: list[Message]
    nbytes: int = 0

    def add(self, run: list[Message]) -> bool:
        """Hold ``run`` too; whether the records held reached a bound."""
        self.records.extend(run)
        self.nbytes += sum(map(len, run))
        return len(self.records) >= HELD_MAX or self.nbytes >= HELD_MAX_BYTES


def static_member_fenced(err: KafkaError) -> bool:
    """True if the group consumer was fenced by another member with its ``group.instance.id``:
    after its session timed out during an outage, its own rejoin replaced it (librdkafka
    then fails the consumer for good; a new one rejoins at once as the same static member)."""
    return err.code() == KafkaError.FENCED_INSTANCE_ID or (
        err.code() == KafkaError._FATAL and "group.instance.id" in err.str())


class InputSerdes(Protocol):
    """Where the loop finds an input topic's serdes."""

    def of_input(self, topic: str) -> SerdePair: ...


@dataclass(frozen=True)
class LoopTiming:
    """When the loop commits, windows, reports and (in bounded runs) ends."""

    commit_every_s: float
    window_every_s: float  # 0: window() is never called
    status_every_s: float
    bounded: bool = False
    task_count: int = 0  # the job's tasks; a process holding fewer waits end_grace_s
    end_grace_s: float = 4.0
    internal: tuple[str, ...] = ()  # a dataflow's key_by topics (inputs the tasks write)
    # How long the group consumer may go without an assignment after subscribing or losing
    # its partitions before it is taken as stuck and replaced (0: never)
    rejoin_after_s: float = 0.0


class RunLoop:
    """Drives the container's tasks until stopped."""

    def __init__(
        self, manager: TaskManager, *, inputs: list[str],
        serdes: InputSerdes, on_error: ErrorPolicy, faults: ClientFaults, timing: LoopTiming,
        metrics: RuntimeMetrics | None = None, rejoin: Callable[[], None] | None = None,
        purger: InternalTopicPurger | None = None, reset_policy: ResetPolicy | None = None,
        memory: MemoryWatch | None = None,
        queries: tuple[Mailbox, Directory] | None = None,
    ) -> None:
        self.manager = manager
        self._queries = queries  # live queries, answered between iterations (job.query.address)
        self.memory = memory  # RSS against the budget, in each status line
        self.reset_policy = reset_policy or ResetPolicy()
        self._purger = purger  # deletes what a dataflow's internal topics no longer need
        self._rejoin = rejoin  # replaces a group consumer fenced by its own static instance id
        self.tasks = manager.tasks
        self.opener = manager.opener
        self.inputs = inputs
        self._serdes_of = serdes.of_input
        self._on_error = on_error
        self._faults = faults
        self.timing = timing
        self._metrics = metrics  # refreshed once per iteration
        self.stopping = False
        self.last_commit = time.monotonic()  # the last commit of every task
        self._turns = CommitTurns(timing.commit_every_s, start=self.last_commit)  # each task's timer
        self._loaded = False  # the last poll filled a batch: tasks commit together
        self._stalls = StallWatch()  # input partitions no longer fetched while records wait
        self._ahead = WriteAhead(timing.commit_every_s)  # an idle loop's work for the commit
        self._eof: set[tuple[str, int]] = set()
        self._at_end_since: float | None = None
        # Records polled for a task whose pipelined commit is under way: they are handled
        # once it has committed (partition -> the task, its records).
        self._held: dict[int, _Held] = {}

    @property
    def consumer(self) -> Consumer:
        """The group consumer (the manager's: it is replaced when fenced)."""
        return self.manager.consumer

    def run(self) -> None:
        """Iterate until :attr:`stopping` is set."""
        last_status = time.monotonic()
        processed_at_status = 0
        if self.memory is not None:
            self.memory.started()
        if self._queries is not None:
            self._queries[0].open()
        while not self.stopping:
            self.iterate()
            now = time.monotonic()
            if now - last_status >= self.timing.status_every_s:
                done = sum(t.metrics.processed for t in self.tasks.values())
                rate = max(0.0, (done - processed_at_status) / (now - last_status))
                log.info("%s", self.status_line(rate))
                last_status, processed_at_status = now, done

    def iterate(self) -> None:
        """One poll, open, dispatch, window and commit round."""
        self._faults.check()
        self.opener.outage.check()
        msgs = self._poll()
        self._faults.check()  # a rebalance callback may have failed inside consume()
        self.manager.finish_revocations()  # revoked inside consume(): their final commits
        self.manager.settle(wait=False)  # pipelined commits that are over
        self._release_held()
        if self.opener.pending:
            # other tasks running: open in short slices, so their records keep flowing
            for instance in self.manager.open_some(OPEN_SLICE_S if self.tasks
                                                   else OPEN_BUDGET_S):
                for topic in self.inputs:
                    self._eof.discard((topic, instance.partition))
        for t in list(self.tasks.values()):  # side-input records that arrived meanwhile
            if t.side_inputs is not None and not self.manager.committing(t.partition):
                t.side_inputs.poll()
        self._dispatch(msgs)
        if msgs:
            crash_point("mid-batch")
        tasks = self.tasks
        now = time.monotonic()
        if self.timing.window_every_s:
            for t in list(tasks.values()):
                if (now - t.last_window >= self.timing.window_every_s
                        and not self.manager.committing(t.partition)):
                    t.last_window = now
                    try:
                        t.task.window(t.collector, t.coordinator)
                    except TASK_MOVED as exc:
                        self.manager.failed(CommitFailure(t, exc))
                    except NOT_USER_CODE:
                        raise
                    except Exception as exc:  # the user's code: one line naming its frame
                        if getattr(exc, "not_the_message", False):
                            raise
                        raise UserCodeError(t.task, "window", exc) from exc
        self._turns.track(tasks, now)
        due = self._turns.due(now, self._loaded)
        if due and self._turns.pipelined(self._loaded):  # keeping up: a turn, pipelined
            self._start_turn([tasks[p] for p in due])
        elif due:  # all together (under load): side by side, the loop waits
            self.commit(None if len(due) == len(tasks) else [tasks[p] for p in due], turn=True)
        else:  # commits asked for in window(): no message follows to carry them out
            asked = [t for t in tasks.values() if t.coordinator.commit_requested]
            if asked:
                self.commit(asked)
        if any(t.coordinator.shutdown_requested for t in tasks.values()):
            self.stopping = True
        if self.timing.bounded and self.tasks and self._at_end():  # first: what is held
            self.manager.settle()
            self._release_held()
        if self.timing.bounded and self._bounded_end(now):
            for t in tasks.values():
                t.task.on_end_of_stream(t.collector, t.coordinator)
            self.stopping = True
        self._check_membership(now)
        self._stalls.check(self.tasks, self.inputs, self.consumer, now,
                           kafka_up=self.opener.outage.since is None)
        if self._metrics is not None:
            self._metrics.refresh(self.consumer, now)
        if self._queries is not None:  # nothing is half done now: answer waiting queries
            mailbox, directory = self._queries
            mailbox.serve(directory, busy=self._loaded)

    def _check_membership(self, now: float) -> None:
        """Replace a group consumer that never got back into its group.

        After a broker outage librdkafka rejoins the group by itself; once (a CI run after a
        SIGSTOPped broker) a consumer never did: its coordinator request stayed queued, no
        assignment came, and the process sat idle while Kafka answered. A rebalance ends
        within the group's rebalance timeout (``max.poll.interval.ms``) and a dead member's
        session, so a consumer without an assignment for ``rejoin_after_s`` (longer than
        both) is stuck: a new one rejoins as the same static member."""
        since = self.manager.joining_since
        if (self._rejoin is None or not self.timing.rejoin_after_s or since is None
                or now - since < self.timing.rejoin_after_s):
            return
        log.warning("the group consumer has had no assignment for %.0fs (since it joined or "
                    "lost its partitions; a rebalance ends within max.poll.interval.ms): "
                    "taking it as stuck and rejoining with a new consumer", now - since)
        self._rejoin()

    def _poll(self) -> list[Message]:
        """The records ready now, up to a batch; when none are, the first to arrive within
        POLL_TIMEOUT_S, QUERY_POLL_TIMEOUT_S when it serves queries (the next poll takes
        those that came with it). Under load every poll returns a full batch; when light, a
        record is processed as soon as it arrives, not when a batch has filled or the
        timeout has passed (one consume call waits for either). Each poll's records are
        dispatched before the next poll, which may serve a rebalance. While a task can
        open, the opening is the wait: no poll waits for input (none flows before the first
        task is ready). While every task commits pipelined none could take a record: the
        loop waits for the first commit to end instead of polling records it would hold
        (they stay in the consumer's queue, inside the memory plan's input budget)."""
        if self.manager.all_committing() and not self.opener.due:
            self.manager.await_a_commit(POLL_TIMEOUT_S)
        msgs = self.consumer.consume(POLL_BATCH, 0)
        self._loaded = len(msgs) >= POLL_BATCH
        if msgs or self.opener.due:
            return msgs
        if self._write_ahead():  # a chunk of the next commit's write-down, then look again
            return self.consumer.consume(POLL_BATCH, 0)
        return self.consumer.consume(
            1, QUERY_POLL_TIMEOUT_S if self._queries is not None else POLL_TIMEOUT_S)

    def _write_ahead(self) -> bool:
        """Idle before a commit: write a chunk of dirty store entries down
        (millpond.tasks.writeahead); whether anything was written. A task whose producer
        was fenced meanwhile is closed as at a commit."""
        now = time.monotonic()
        return self._ahead.step(((t, self._turns.since(p, now)) for p, t in self.tasks.items()
                                 if not self.manager.committing(p)),
                                lambda t, exc: self.manager.failed(CommitFailure(t, exc)))

    def _bounded_end(self, now: float) -> bool:
        """Every task here is at the end of its inputs. A process holding only some of the
        job's tasks waits ``end_grace`` (a heartbeat) for partitions a leaving process hands
        back before it ends."""
        if not (self.tasks and not self.opener.pending and self._at_end()):
            self._at_end_since = None
            return False
        if self.timing.internal and not self._internal_drained(now):
            return False
        if len(self.tasks) >= self.timing.task_count:
            return True
        if self._at_end_since is None:
            self._at_end_since = now
        return now - self._at_end_since >= self.timing.end_grace_s

    def commit(self, tasks: list[TaskInstance] | None = None, turn: bool = False) -> None:
        """Commit ``tasks`` (default: all open); each restarts its own commit timer
        (:mod:`millpond.tasks.turns`). ``turn``: the commit is the timer's (a task asking for
        its own commit holds back no other task's turn)."""
        chosen = list(self.tasks.values()) if tasks is None else tasks
        self.manager.commit(chosen)
        now = time.monotonic()
        self._committed(chosen, now, turn)
        if tasks is None:
            self.last_commit = now

    def _start_turn(self, chosen: list[TaskInstance]) -> None:
        """A turn's tasks commit pipelined (:meth:`TaskManager.start_commit`): the loop
        handles the other tasks' records meanwhile and holds these tasks' own until each
        has committed. Their timers count from the start, where the commit's records were
        cut."""
        now = time.monotonic()
        self.manager.start_commit(chosen)
        self._committed(chosen, now, turn=True)
        if len(chosen) == len(self.tasks):
            self.last_commit = now

    def _committed(self, chosen: list[TaskInstance], now: float, turn: bool) -> None:
        """``chosen`` committed (or began to) at ``now``: their commit timers and write-ahead
        restart; internal topics are purged below the tasks' committed positions."""
        partitions = [t.partition for t in chosen]
        self._turns.committed(partitions, now, turn)
        self._ahead.committed(partitions)
        if self._purger is not None:  # below each task's committed positions only
            self._purger.after_commit(list(self.tasks.values()), now)

    def _release_held(self) -> None:
        """Handle the records held for tasks whose pipelined commit is over (a task closed
        meanwhile reads them again from its checkpoint when it reopens). Handed over, they
        are a batch after a commit, as a poll's are (the ``mid-batch`` crash point: a job
        whose input was all polled while its tasks committed gets no other)."""
        fed = False
        for p in [p for p in self._held if not self.manager.committing(p)]:
            held = self._held.pop(p)
            if self.tasks.get(p) is held.task:
                self._feed(p, held.task, held.records)
                fed = True
        if fed:
            crash_point("mid-batch")

    def _dispatch(self, msgs: list[Message]) -> None:
        tasks = self.tasks
        runs: dict[int, list[Message]] = {}
        fenced: KafkaError | None = None
        gaps: list[tuple[str, int, int]] = []  # fetches out of range: (topic, partition, offset)
        for msg in msgs:
            err = msg.error()
            if err is None:
                run = runs.get(msg.partition())  # type: ignore[arg-type]
                if run is None:
                    run = runs[msg.partition()] = []  # type: ignore[index]
                run.append(msg)
            elif err.code() == KafkaError._PARTITION_EOF:
                if msg.partition() in tasks:
                    self._eof.add((msg.topic() or "", msg.partition() or 0))
            elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                gaps.append((msg.topic() or "", msg.partition() or 0, msg.offset() or 0))
            elif (denial := self._faults.consumer_error(err, msg.topic())) is not None:
                raise denial
            elif static_member_fenced(err) and self._rejoin is not None:
                fenced = err
            elif err.fatal() or err.code() == KafkaError._FATAL:
                raise KafkaClientError(f"the job's group consumer failed fatally: {err.str()} "
                                       "(state is safe: the next start restores from the last "
                                       "commit)")
            elif (dropped := LIMITER.admit(f"consumer {err.code()}")) is not None:
                log.warning("consumer: %s%s", err.str(), suffix(dropped))
        if fenced is not None and self._rejoin is not None:
            log.warning("the group consumer was fenced by its own static membership (%s): the "
                        "group coordinator lost this process's session (a broker restart or "
                        "outage); rejoining with a new consumer, tasks restore from their last "
                        "commit", fenced.str())
            self._rejoin()
            return
        unfinished: set[int] = set()  # partitions whose messages were not all handled
        now = time.monotonic()
        for partition, run in runs.items():
            task = tasks.get(partition)
            self._stalls.fed(partition, now)
            stall_fetch(self.consumer, partition, run)
            held = self._held.get(partition)
            if held is not None:  # behind records already held
                if held.add(run):  # a bound: wait for the commit
                    self.manager.settle(partition)
                    self._release_held()
            elif task is not None and self.manager.committing(partition):
                self._held[partition] = held = _Held(task, [])
                held.add(run)
            elif not self._feed(partition, task, run):
                unfinished.add(partition)
        if gaps:  # held records come before a gap
            self.manager.settle()
            self._release_held()
        for topic, partition, offset in gaps:  # not for an open task that stopped mid-run
            if partition not in unfinished or partition not in tasks:
                self._out_of_range(topic, partition, offset)

    def _feed(self, partition: int, task: TaskInstance | None, run: list[Message]) -> bool:
        """Hand ``run`` (one partition's records, in order) to ``task``; whether all were
        handled (not: the task failed, was closed, or asked to shut down)."""
        done = 0
        while task is not None and done < len(run):
            try:
                done += task.handle_batch(run[done:] if done else run, self._serdes_of,
                                          self._on_error)
            except TASK_MOVED as exc:
                self.manager.failed(CommitFailure(task, exc))
                break
            if task.coordinator.shutdown_requested:
                self.stopping = True
                break
            if task.coordinator.commit_requested:
                self.commit([task])
                task = self.tasks.get(partition)  # a failed commit closes the task
        return done >= len(run)

    def _out_of_range(self, topic: str, partition: int, offset: int) -> None:
        """The group consumer's fetch of ``topic[partition]`` at ``offset`` was out of range
        (records deleted before the task read them, or a recreated topic): the policy
        decides where the task resumes (or stops the job); the partition's fetching, which
        librdkafka stopped, restarts there. A task closed meanwhile is left to its next
        opening (from its checkpoint), its partition assigned anew, paused, so that opening
        can seek it."""
        task = self.tasks.get(partition)
        tp = TopicPartition(topic, partition)
        if task is None:
            if partition in self.opener.pending:  # reopening: its seek must work again
                self.consumer.incremental_unassign([tp])
                again = TopicPartition(topic, partition, OFFSET_BEGINNING)
                self.consumer.incremental_assign([again])
                self.consumer.pause([again])
            return
        low, high = watermarks(self.consumer, topic, partition)
        reset = self.reset_policy.resolve(topic, partition, offset, low, high, "while running")
        position = offset
        if reset is not None:
            task.apply_reset(reset)
            position = reset.new
            self._eof.discard((topic, partition))
        # librdkafka refuses to seek a partition whose fetch failed this way: assign it anew.
        self.consumer.incremental_unassign([tp])
        self.consumer.incremental_assign([TopicPartition(topic, partition, position)])

    def _internal_drained(self, now: float) -> bool:
        """Records a task wrote to an internal topic become readable at its commit: commit
        (at most twice a second), then end only once every task has read its partition of
        every internal topic to its true end (the last commit wrote nothing more).

        The true end, not the read_committed consumer's high watermark (the last stable
        offset): that stops short of a transaction still open and of one whose commit marker
        the broker has not written yet, so a run could end with records it had just
        committed unread."""
        if now - self.last_commit >= 0.5:
            self.commit()
        parts = [(topic, p) for p in self.tasks for topic in self.timing.internal]
        ends = self._true_ends(parts)
        for topic, p in parts:
            # The consumer's position, not the last record's offset + 1: it moves past the
            # transaction markers, which sit below the end too (none yet: where the task
            # started).
            position = self.consumer.position([TopicPartition(topic, p)])[0].offset
            if max(position, self.tasks[p].next_offsets.get(topic, 0)) < ends[(topic, p)]:
                return False
        return True

    def _true_ends(self, parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The log end offset of each ``(topic, partition)`` (read_uncommitted), in one
        request through the purger's admin client (else the consumer's watermarks)."""
        if self._purger is None:
            return {(t, p): watermarks(self.consumer, t, p)[1] for t, p in parts}
        return log_end_offsets(self._purger.admin, parts)

    def _at_end(self) -> bool:
        """Every input partition of every task here reported its end."""
        return all((t, p) in self._eof for p in self.tasks for t in self.inputs)

    def lag(self) -> dict[str, int]:
        """Messages left per task (high watermark minus next offset), from cached watermarks."""
        return {t.name: sum(t.lag(self.consumer, self.inputs).values())
                for t in self.tasks.values()}

    def status_line(self, rate: float) -> str:
        """One readable line: rate, total lag (and the task furthest behind), tasks."""
        lag = self.lag()
        total = sum(lag.values())
        worst = max(lag.items(), key=lambda kv: kv[1]) if lag else None
        behind = f" (most: {worst[0]} {worst[1]:,})" if worst and worst[1] and len(lag) > 1 else ""
        opening = sorted(self.opener.pending)
        tasks = ", ".join(str(p) for p in sorted(self.tasks)) or "none"
        more = f", opening {', '.join(map(str, opening))}" if opening else ""
        memory = f", {self.memory.status()}" if self.memory is not None else ""
        return (f"status: {rate:,.0f} msg/s, lag {total:,} msgs{behind}, "
                f"{len(self.tasks)} tasks [{tasks}]{more}{memory}")

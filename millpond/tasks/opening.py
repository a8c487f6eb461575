"""Opening tasks inside the run loop, a restore batch at a time.

The assignment callback only records which partitions arrived; the run loop calls
:meth:`TaskOpener.step` between polls, so heartbeats, revocations and new rebalances are
seen while a large store restores (Kafka Streams' state updater does the same). Opening a
task is a generator (:func:`open_task`): init the task's transactional producer (which
fences the previous owner and aborts its open transaction), read its checkpoint, recover
each store, create the user task. A partition revoked or lost meanwhile is dropped by
closing its generator, which releases everything it opened. Tasks open one at a time:
they share the restore consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import Consumer

from millpond.api import StreamTask, TaskContext
from millpond.changelog.checkpoint import read_checkpoints, task_name
from millpond.changelog.errors import StoreLockedError
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.restore import RestoreListener, RestoreStats
from millpond.config import Config
from millpond.kafka.admin import OutputTopics
from millpond.kafka.ends import EndsLookup
from millpond.kafka.errors import (
    BrokerUnreachableError,
    ProducerFencedError,
    TransactionAbortedError,
)
from millpond.kafka.outage import OutageClock
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import watermarks
from millpond.sideinputs.reader import SideInputReader
from millpond.sideinputs.runtime import SideInputs
from millpond.tasks.collector import KafkaCollector, SerdeLookup
from millpond.tasks.errors import StateDirError, UserCodeError
from millpond.tasks.input_reset import Reset, ResetPolicy
from millpond.tasks.instance import NOT_USER_CODE, TaskInstance
from millpond.tasks.storage import TaskStorage

if TYPE_CHECKING:
    from millpond.backup import StateBackups

log = logging.getLogger("millpond.container")


def reopen_hold_s(consumer_conf: dict[str, Any]) -> float:
    """How long a task whose producer was fenced or whose commit the group refused waits
    before it is reopened, unless a rebalance comes first: two heartbeats and a second, by
    which a zombie's consumer has learnt that its membership ended."""
    return 2 * int(consumer_conf.get("heartbeat.interval.ms", 3000)) / 1000.0 + 1.0

Opening = Generator[object, None, TaskInstance]

# How soon a task whose commit or opening failed because Kafka was unreachable is opened
# again: each try waits for Kafka itself (init_transactions), so it resumes as Kafka answers.
RETRY_S = 1.0
INIT_TIMEOUT_S = 30.0
T = TypeVar("T")
# One thread for an opening's reads that wait on Kafka (the task's checkpoint, its inputs'
# offsets): the run loop keeps processing the open tasks meanwhile. One at a time: they
# use the restore consumer, which only the task being opened uses.
_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="millpond-open")


def waiting(read: Callable[[], T]) -> Generator[None, None, T]:
    """``read()`` on the opening thread, yielding (so the run loop processes and polls)
    until it returns. Dropped meanwhile, it waits for the read to end: the next opening
    uses the same consumer."""
    future = _READER.submit(read)
    try:
        return (yield from _done(future, 0.005))
    except GeneratorExit:
        try:
            future.result()
        except Exception:  # the opening is being dropped: its read's failure is moot
            pass
        raise


def _done(future: Future[T], poll_s: float) -> Generator[None, None, T]:
    """``future``'s result, yielding every ``poll_s`` seconds until it is done."""
    while True:
        try:
            return future.result(timeout=poll_s)
        except FutureTimeout:
            yield None


def unreachable(exc: BaseException) -> bool:
    """True if ``exc`` means Kafka did not answer (retry), not that the task moved."""
    return isinstance(exc, BrokerUnreachableError) or (
        isinstance(exc, TransactionAbortedError) and exc.unavailable)


@dataclass
class OpenContext:
    """What opening a task needs, fixed for the life of the container."""

    config: Config
    guarantee: Guarantee
    task_class: type[StreamTask]
    inputs: list[str]
    producer_conf: dict[str, Any]
    transactional_prefix: str
    checkpoint_topic: str
    restore_consumer: Consumer
    stream_serdes: SerdeLookup
    listener: RestoreListener | None = None
    outputs: OutputTopics | None = None
    side_inputs: SideInputs | None = None
    backups: StateBackups | None = None  # built from job.state.backup.* when not given
    # What a task does when its checkpointed input offset is out of range
    reset_policy: ResetPolicy = field(default_factory=ResetPolicy)
    # Where the tasks' producers read their changelogs' last offsets (millpond.kafka.ends)
    # instead of a delivery report per record; None: from the reports
    ends: EndsLookup | None = None

    def __post_init__(self) -> None:
        if self.backups is None and self.config.backup is not None:
            from millpond.backup import state_backups

            self.backups = state_backups(self.config)

    def new_producer(self, partition: int) -> TrackedProducer:
        """The task's transactional producer: one ``transactional.id`` per task, so a new
        owner's ``init_transactions`` fences any older holder of the task."""
        commit_ms = self.config.job.commit_ms
        txn_timeout = min(900_000, max(60_000, 2 * commit_ms + 30_000))
        conf = {**self.producer_conf,
                "transactional.id": f"{self.transactional_prefix}-{task_name(partition)}",
                "transaction.timeout.ms": txn_timeout,
                "message.timeout.ms": txn_timeout - 10_000}
        return TrackedProducer(conf, ends=self.ends)


class Fences:
    """Each task's first step, ``init_transactions`` (it fences the task's previous owner and
    aborts its open transaction), run ahead for every task due to open, several at once.

    It is a broker round trip, about a second when the previous owner's transaction has to be
    rolled back first (after a broker outage every task's is): one task at a time, a process
    with many tasks would resume one task a second. Tasks still open one at a time (they
    share the restore consumer); only their fences overlap. A task reads its state only after
    its own fence completed, so the fencing order is unchanged."""

    def __init__(self, make: Callable[[int], TrackedProducer], workers: int = 8) -> None:
        self._make = make
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="millpond-fence")
        self._ahead: dict[int, Future[TrackedProducer]] = {}

    def start(self, partition: int) -> None:
        """Begin fencing ``partition``'s task in the background (if not begun)."""
        if partition not in self._ahead:
            self._ahead[partition] = self._pool.submit(self._fence, partition)

    def _fence(self, partition: int) -> TrackedProducer:
        producer = self._make(partition)
        try:
            producer.init_transactions(INIT_TIMEOUT_S)
        except BaseException:
            producer.discard()
            raise
        return producer

    def take(self, partition: int) -> Generator[None, None, TrackedProducer]:
        """The task's fenced producer, yielding (so the run loop polls) while it is made."""
        self.start(partition)
        future = self._ahead.pop(partition)
        try:
            return (yield from _done(future, 0.02))
        except GeneratorExit:  # the opening was dropped meanwhile
            future.add_done_callback(_discard)
            raise

    def drop(self, partition: int) -> None:
        """Forget ``partition`` (revoked): a fence made ahead is discarded when done."""
        future = self._ahead.pop(partition, None)
        if future is not None:
            future.add_done_callback(_discard)

    def close(self) -> None:
        """Discard every fence made ahead; fences not begun are not made."""
        for partition in list(self._ahead):
            self.drop(partition)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _discard(future: Future[TrackedProducer]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().discard()


def open_task(ctx: OpenContext, partition: int, fences: Fences) -> Opening:
    """Open the task of ``partition`` step by step; returns it ready to process
    (``fences``: where its producer is fenced, possibly ahead of time)."""
    began = time.monotonic()
    producer = yield from fences.take(partition)
    try:
        producer.begin_transaction()  # recovery may re-write keys (trim) inside it
        yield None
        checkpoints = yield from waiting(lambda: read_checkpoints(
            ctx.restore_consumer, ctx.checkpoint_topic, [partition]))
        ckpt = checkpoints.get(task_name(partition))
        try:
            storage = yield from TaskStorage.open_steps(
                ctx.config, partition, ctx.guarantee, producer, ctx.restore_consumer,
                ckpt.changelogs if ckpt else None, ctx.listener,
                side_checkpointed=dict(ckpt.side_inputs) if ckpt else {},
                topics=ckpt.topics if ckpt else None, backups=ctx.backups,
                committed_reads=ctx.config.job.query_address is not None,
                side_partitions=ctx.side_inputs.partition_counts if ctx.side_inputs else None)
        except OSError as exc:
            if exc.filename is None:
                raise
            raise StateDirError(ctx.config, partition, exc) from exc
        side: SideInputReader | None = None
        try:
            if ctx.side_inputs:  # bootstrapped before init() and the first message
                side = yield from ctx.side_inputs.open_steps(
                    partition, storage.stores, ctx.reset_policy.side_input)
            positions, resets, ends = yield from waiting(lambda: start_positions(
                ctx.restore_consumer, ctx.inputs, partition,
                dict(ckpt.inputs) if ckpt else {}, ctx.reset_policy))
            collector = KafkaCollector(producer, ctx.stream_serdes, outputs=ctx.outputs)
            instance = TaskInstance(partition, ctx.task_class(), storage, producer, collector,
                                    positions, side_inputs=side,
                                    skipped_inputs=dict(ckpt.skipped) if ckpt else {},
                                    input_ends=ends)
            for reset in resets:
                instance.apply_reset(reset)
            instance.metrics.restored_records += storage.restored_records
            instance.metrics.restore_s = time.monotonic() - began
            context = TaskContext(task_name(partition), partition, ctx.config,
                                  storage.user_stores())
            try:
                instance.task.init(context)
            except NOT_USER_CODE:
                raise
            except Exception as exc:  # the user's code: one line naming class and frame
                raise UserCodeError(instance.task, "init", exc) from exc
        except BaseException:
            if side is not None:
                side.close()
            storage.close()
            raise
    except BaseException:
        producer.abort_transaction(5)
        producer.discard()
        raise
    return instance


def start_positions(
    consumer: Consumer, inputs: list[str], partition: int, checkpointed: dict[str, int],
    policy: ResetPolicy | None = None,
) -> tuple[dict[str, int], list[Reset], dict[str, int]]:
    """The next offset of each input partition: the checkpoint's, else the topic's start;
    the inputs whose checkpointed offset is below the log start (deleted by retention
    before it was read), resolved by ``policy`` (warned about; ``error`` raises
    :class:`millpond.tasks.input_reset.InputGapError`); and each input partition's end as
    read now (the task's lag until its first fetch brings the consumer's own). A checkpoint beyond the end is left
    to the group consumer, whose fetch says so (the run loop resolves it): ``high`` here is
    the last stable offset, which an at-least-once task may have read past.

    Every input gets an explicit offset, so every checkpoint names all of them.
    """
    policy = policy or ResetPolicy()
    positions: dict[str, int] = {}
    resets: list[Reset] = []
    ends: dict[str, int] = {}
    for topic in inputs:
        low, high = watermarks(consumer, topic, partition)
        ends[topic] = high
        offset = checkpointed.get(topic)
        if offset is None:
            positions[topic] = low
            continue
        reset = (policy.resolve(topic, partition, offset, low, high, "at start")
                 if offset < low else None)
        if reset is not None:
            resets.append(reset)
            offset = reset.new
        positions[topic] = offset
    return positions, resets, ends


# A task whose store directory another process still holds (two processes of a job sharing
# one store base dir, a partition moving between them) tries again this often, for at most
# LOCKED_WAIT_S: the previous owner releases it when its final commit is over (1.1 s once
# during a rebalance, benchmarks/results.md); a process that holds it longer is another one
# running the same task, and the error says so.
LOCKED_RETRY_S = 0.1
LOCKED_WAIT_S = 30.0


class TaskOpener:
    """The queue of tasks to open, advanced by the run loop within a time budget."""

    def __init__(self, open_steps: Callable[[int], Opening], hold_s: float,
                 outage: OutageClock | None = None, fences: Fences | None = None) -> None:
        self._open_steps = open_steps
        self.hold_s = hold_s
        self.outage = outage or OutageClock(0.0, "?")
        self.fences = fences  # fences tasks that are due ahead of their turn
        self._queue: dict[int, float] = {}  # partition -> monotonic time it may start
        self._current: tuple[int, Opening] | None = None
        # The opening task's restores so far, per store (read by metrics): the last stats
        # each store's restore yielded.
        self.progress: dict[str, RestoreStats] = {}
        self._locked_since: dict[int, float] = {}  # partition -> first found locked

    @property
    def opening(self) -> int | None:
        """The partition whose task is being opened (restored) now, if any."""
        return self._current[0] if self._current is not None else None

    @property
    def pending(self) -> set[int]:
        """Partitions assigned here whose tasks are not open yet."""
        out = set(self._queue)
        if self._current is not None:
            out.add(self._current[0])
        return out

    @property
    def due(self) -> bool:
        """A task can take its next opening step now (one under way, or one not held)."""
        if self._current is not None:
            return True
        now = time.monotonic()
        return any(at <= now for at in self._queue.values())

    def add(self, partition: int, hold_s: float = 0.0) -> None:
        """Open the task of ``partition`` (after ``hold_s`` seconds, or the next rebalance)."""
        self._queue[partition] = time.monotonic() + hold_s

    def release_holds(self) -> None:
        """A rebalance happened: held tasks may open now (if they are still ours)."""
        now = time.monotonic()
        for p in self._queue:
            self._queue[p] = min(self._queue[p], now)

    def drop(self, partition: int) -> None:
        """Forget ``partition``; an opening under way is closed, releasing what it opened."""
        self._queue.pop(partition, None)
        self._locked_since.pop(partition, None)
        if self.fences is not None:
            self.fences.drop(partition)
        if self._current is not None and self._current[0] == partition:
            _, steps = self._current
            self._current = None
            steps.close()
            log.info("task %s: dropped while opening (partition moved)", task_name(partition))

    def step(self, budget_s: float) -> list[TaskInstance]:
        """Advance openings for about ``budget_s`` seconds; return the tasks now ready."""
        ready: list[TaskInstance] = []
        deadline = time.monotonic() + budget_s
        if self.fences is not None:
            now = time.monotonic()
            for p, at in self._queue.items():
                if at <= now:
                    self.fences.start(p)
        while time.monotonic() < deadline:
            if self._current is None:
                now = time.monotonic()
                due = [p for p, at in self._queue.items() if at <= now]
                if not due:
                    break
                partition = min(due, key=lambda p: (self._queue[p], p))
                del self._queue[partition]
                self._current = (partition, self._open_steps(partition))
                self.progress = {}
            partition, steps = self._current
            try:
                step = next(steps)
                if isinstance(step, RestoreStats):
                    self.progress[step.store] = step
            except StopIteration as done:
                self._current = None
                self._locked_since.pop(partition, None)
                self.outage.available()
                ready.append(done.value)
            except StoreLockedError as exc:
                self._current = None
                now = time.monotonic()
                first = partition not in self._locked_since
                since = self._locked_since.setdefault(partition, now)
                if now - since >= LOCKED_WAIT_S:
                    del self._locked_since[partition]
                    raise
                if first:
                    log.info("task %s: %s; trying again for up to %.0fs (a previous owner "
                             "releases it once its final commit is over)",
                             task_name(partition), exc, LOCKED_WAIT_S)
                self.add(partition, LOCKED_RETRY_S)
            except (ProducerFencedError, TransactionAbortedError, BrokerUnreachableError) as exc:
                self._current = None
                if unreachable(exc):
                    self.outage.unavailable(f"opening task {task_name(partition)}: {exc}")
                    self.add(partition, RETRY_S)
                    continue
                log.info("task %s: opening interrupted (%s); retrying after a rebalance or "
                         "%.0fs", task_name(partition), exc, self.hold_s)
                self.add(partition, self.hold_s)
            except BaseException:
                self._current = None
                raise
        return ready

    def close(self) -> None:
        """Abandon every opening (shutdown)."""
        if self._current is not None:
            self.drop(self._current[0])
        for p in list(self._queue):
            self.drop(p)

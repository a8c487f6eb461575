"""The run loop: poll, open pending tasks a step at a time, dispatch, window, commit.

One iteration: poll a batch from the group consumer (serving rebalance callbacks), spend
a bounded slice of time opening tasks, hand each partition's messages to its task, call
``window()`` on schedule, commit every ``task.commit.ms`` (and a task that asks, after the
message or the ``window()`` call that asked), and end when asked to stop or, in bounded
runs, when every input partition is at its end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from millpond.api import SerdePair
from millpond.tasks.faults import crash_point
from millpond.tasks.instance import TASK_MOVED, ErrorPolicy, TaskInstance
from millpond.tasks.opening import TaskOpener

log = logging.getLogger("millpond.container")

POLL_BATCH = 1000
POLL_TIMEOUT_S = 0.1
OPEN_BUDGET_S = 0.2  # time given to opening tasks (restore batches) per iteration


class RunLoop:
    """Drives the container's tasks until stopped."""

    def __init__(
        self, consumer: Consumer, tasks: dict[int, TaskInstance], opener: TaskOpener, *,
        inputs: list[str], commit: Callable[[list[TaskInstance] | None], None],
        activate: Callable[[TaskInstance], None], on_error: ErrorPolicy,
        task_failed: Callable[[TaskInstance, Exception], None],
        serdes_of: Callable[[str], SerdePair], check: Callable[[], None],
        commit_every_s: float, window_every_s: float, bounded: bool, status_every_s: float,
        task_count: int = 0, end_grace_s: float = 4.0,
        tick: Callable[[Consumer, float], None] | None = None,
    ) -> None:
        self.consumer = consumer
        self.tasks = tasks
        self.opener = opener
        self.inputs = inputs
        self._commit = commit
        self._activate = activate
        self._task_failed = task_failed
        self._on_error = on_error
        self._serdes_of = serdes_of
        self._check = check
        self.commit_every = commit_every_s
        self.window_every = window_every_s
        self.bounded = bounded
        self.status_every = status_every_s
        self.task_count = task_count
        self.end_grace = end_grace_s
        self._tick = tick  # called once per iteration (metrics refresh), if given
        self.stopping = False
        self.last_commit = time.monotonic()
        self._eof: set[tuple[str, int]] = set()
        self._at_end_since: float | None = None

    def run(self) -> None:
        """Iterate until :attr:`stopping` is set."""
        last_status = time.monotonic()
        processed_at_status = 0
        while not self.stopping:
            self.iterate()
            now = time.monotonic()
            if now - last_status >= self.status_every:
                done = sum(t.metrics.processed for t in self.tasks.values())
                rate = max(0.0, (done - processed_at_status) / (now - last_status))
                log.info("%s", self.status_line(rate))
                last_status, processed_at_status = now, done

    def iterate(self) -> None:
        """One poll, open, dispatch, window and commit round."""
        self._check()
        msgs = self.consumer.consume(POLL_BATCH, POLL_TIMEOUT_S)
        self._check()  # a rebalance callback may have failed inside consume()
        if self.opener.pending:
            for instance in self.opener.step(OPEN_BUDGET_S):
                self.tasks[instance.partition] = instance
                for topic in self.inputs:
                    self._eof.discard((topic, instance.partition))
                self._activate(instance)
        for t in list(self.tasks.values()):  # side-input records that arrived meanwhile
            if t.side_inputs is not None:
                t.side_inputs.poll()
        self._dispatch(msgs)
        if msgs:
            crash_point("mid-batch")
        tasks = self.tasks
        now = time.monotonic()
        if self.window_every:
            for t in list(tasks.values()):
                if now - t.last_window >= self.window_every:
                    t.last_window = now
                    try:
                        t.task.window(t.collector, t.coordinator)
                    except TASK_MOVED as exc:
                        self._task_failed(t, exc)
        if now - self.last_commit >= self.commit_every:
            self.commit()
        else:  # commits asked for in window(): no message follows to carry them out
            asked = [t for t in tasks.values() if t.coordinator.commit_requested]
            if asked:
                self.commit(asked)
        if any(t.coordinator.shutdown_requested for t in tasks.values()):
            self.stopping = True
        if self.bounded and self._bounded_end(now):
            for t in tasks.values():
                t.task.on_end_of_stream(t.collector, t.coordinator)
            self.stopping = True
        if self._tick is not None:
            self._tick(self.consumer, now)

    def _bounded_end(self, now: float) -> bool:
        """Every task here is at the end of its inputs. A process holding only some of the
        job's tasks waits ``end_grace`` (a heartbeat) for partitions a leaving process hands
        back before it ends."""
        if not (self.tasks and not self.opener.pending and self._at_end()):
            self._at_end_since = None
            return False
        if len(self.tasks) >= self.task_count:
            return True
        if self._at_end_since is None:
            self._at_end_since = now
        return now - self._at_end_since >= self.end_grace

    def commit(self, tasks: list[TaskInstance] | None = None) -> None:
        """Commit ``tasks`` (default: all open, which restarts the commit timer; a commit a
        task asked for does not, or a task asking often would hold the others' back)."""
        self._commit(tasks)
        if tasks is None:
            self.last_commit = time.monotonic()

    def _dispatch(self, msgs: list[Message]) -> None:
        tasks = self.tasks
        runs: dict[int, list[Message]] = {}
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
            elif err.fatal():
                raise KafkaException(err)
            else:
                log.warning("consumer: %s", err.str())
        for partition, run in runs.items():
            task = tasks.get(partition)
            done = 0
            while task is not None and done < len(run):
                try:
                    done += task.handle_batch(run[done:] if done else run, self._serdes_of,
                                              self._on_error)
                except TASK_MOVED as exc:
                    self._task_failed(task, exc)
                    break
                if task.coordinator.shutdown_requested:
                    self.stopping = True
                    break
                if task.coordinator.commit_requested:
                    self.commit([task])
                    task = tasks.get(partition)  # a failed commit closes the task

    def _at_end(self) -> bool:
        """Every input partition of every task here reported its end."""
        return all((t, p) in self._eof for p in self.tasks for t in self.inputs)

    def lag(self) -> dict[str, int]:
        """Messages left per task (high watermark minus next offset), from cached watermarks."""
        return {t.name: sum(input_lag(self.consumer, self.inputs, p, t.next_offsets).values())
                for p, t in self.tasks.items()}

    def status_line(self, rate: float) -> str:
        """One readable line: rate, total lag (and the task furthest behind), tasks."""
        lag = self.lag()
        total = sum(lag.values())
        worst = max(lag.items(), key=lambda kv: kv[1]) if lag else None
        behind = f" (most: {worst[0]} {worst[1]:,})" if worst and worst[1] and len(lag) > 1 else ""
        opening = sorted(self.opener.pending)
        tasks = ", ".join(str(p) for p in sorted(self.tasks)) or "none"
        more = f", opening {', '.join(map(str, opening))}" if opening else ""
        return (f"status: {rate:,.0f} msg/s, lag {total:,} msgs{behind}, "
                f"{len(self.tasks)} tasks [{tasks}]{more}")


def input_lag(consumer: Consumer, inputs: list[str], partition: int,
              next_offsets: dict[str, int]) -> dict[str, int]:
    """Messages between each input's next offset and its partition end, from the consumer's
    cached watermarks (updated by every fetch: no broker round trip); inputs whose end is
    not known yet are left out."""
    out: dict[str, int] = {}
    for topic in inputs:
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                     cached=True)
        except (KafkaException, RuntimeError):
            continue
        if high >= 0:
            out[topic] = max(0, high - next_offsets.get(topic, 0))
    return out

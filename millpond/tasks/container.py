"""The container: hosts the tasks of the input partitions this process owns.

Every process of a job joins one consumer group (cooperative-sticky) on the job's first
input; task N also reads partition N of every other input. The container wires the parts:

* :mod:`millpond.tasks.loading` imports the task and listener classes;
* :func:`millpond.changelog.admin.check_job_topics` checks and creates topics;
* :mod:`millpond.tasks.membership`'s rebalance callbacks only record and pause what was
  assigned; tasks are opened (producer init, checkpoint, restore) by
  :mod:`millpond.tasks.opening` inside
* :mod:`millpond.tasks.runloop`, which polls, dispatches, windows and commits through
* :mod:`millpond.tasks.commit` (one transaction per task, fenced by its transactional id);
* :mod:`millpond.tasks.deadletter` decides what a failed message does;
* :mod:`millpond.tasks.stream_serdes` builds the streams' serdes.

A task whose commit fails as an ordinary event (fenced by a new owner, refused by the
group, aborted) is closed without committing and reopened after the next rebalance if it
is still ours: a paused process that resumes cannot make its writes visible.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from types import FrameType
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from millpond.changelog.checkpoint import checkpoint_topic
from millpond.changelog.generations import current_topics
from millpond.changelog.guarantees import STATE_ISOLATION, Guarantee
from millpond.changelog.restore import RestoreListener
from millpond.config import Config
from millpond.kafka import clients
from millpond.kafka.admin import OutputTopics, TopicAdmin, check_job_topics
from millpond.kafka.producer import log_client_error
from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS, restore_consumer
from millpond.metrics import Reporter, parse_reporters, start_reporters
from millpond.partitioner import librdkafka_setting
from millpond.serdes import serdes_for
from millpond.sideinputs.runtime import SideInputs
from millpond.tasks.commit import CommitFailure, CommitProtocol
from millpond.tasks.deadletter import DeadLetterPolicy
from millpond.tasks.errors import MessageError, TaskError
from millpond.tasks.instance import TaskInstance, log_task_summary
from millpond.tasks.loading import load_restore_listener, load_task_class
from millpond.tasks.membership import Membership
from millpond.tasks.opening import OpenContext, TaskOpener, open_task, reopen_hold_s
from millpond.tasks.runloop import RunLoop
from millpond.tasks.stream_serdes import StreamSerdes
from millpond.tasks.telemetry import RuntimeMetrics

if TYPE_CHECKING:
    from millpond.backup import StateBackups

log = logging.getLogger("millpond.container")

STATUS_EVERY_S = 10.0


class Container:
    """Runs a job's tasks in this process until shutdown."""

    def __init__(
        self, config: Config, *, bounded: bool | None = None,
        listener: RestoreListener | None = None, status_every: float = STATUS_EVERY_S,
    ) -> None:
        self.config = config
        job = config.job
        self.guarantee = Guarantee(job.processing_guarantee)
        self.task_class = load_task_class(config)
        for cfg in config.stores.values():
            serdes_for(config, cfg)  # a bad serde fails now, naming its key and line
        if not job.inputs:
            raise config.missing("task.inputs", "every job reads at least one input",
                                 "task.inputs=kafka.page-views")
        self.inputs = [ref.topic for ref in job.inputs]
        bootstrap = config.bootstrap_servers("kafka")
        system = config.systems.get("kafka")
        self._fatal: KafkaError | None = None
        self.client_conf: dict[str, Any] = {"bootstrap.servers": bootstrap,
                                            "error_cb": self._on_client_error}
        self.consumer_conf = {**self.client_conf, **(system.consumer if system else {})}
        self.serdes = StreamSerdes(config)
        self.side_inputs = SideInputs(config, self.consumer_conf, self.guarantee.isolation,
                                      self.serdes.of_input)
        self.inputs = self.side_inputs.task_inputs(self.inputs)
        self.producer_conf = {**self.client_conf, "partitioner": librdkafka_setting(job.partitioner),
                              **(system.producer if system else {})}
        self.bounded = bool(bounded if bounded is not None else config.get("task.bounded") == "true")
        self.listener = listener or load_restore_listener(config)
        self.status_every = status_every
        self.group_id = f"{job.name}-{job.id}"
        self.checkpoint_topic = checkpoint_topic(job.name, job.id)
        self.tasks: dict[int, TaskInstance] = {}
        self._signals = 0
        self._stop_requested = False
        self.on_error = DeadLetterPolicy(config, lambda p: self.tasks[p].producer)
        self.consumer: Consumer | None = None
        self.restore_consumer: Consumer | None = None
        self.opener: TaskOpener | None = None
        self.loop: RunLoop | None = None
        self.committer: CommitProtocol | None = None
        self.membership: Membership | None = None
        self.backups: StateBackups | None = None
        # Metrics reporters (metrics.reporters): validated now, started by run().
        reporting = parse_reporters(config.properties)
        self.metrics = (RuntimeMetrics(job.name, self.tasks, self.inputs,
                                       lambda: self.opener) if reporting else None)
        self._reporting = reporting
        self.reporters: list[Reporter] = []

    def _on_client_error(self, err: KafkaError) -> None:
        log_client_error(err)
        if err.fatal() and self._fatal is None:
            self._fatal = err

    def _check(self) -> None:
        """Raise what a callback could not: a fatal client error, a failed rebalance step."""
        if self.membership is not None and self.membership.error is not None:
            error, self.membership.error = self.membership.error, None
            raise error
        if self._fatal is not None:
            raise TaskError(f"fatal Kafka client error, stopping: {self._fatal.str()} "
                            "(state is safe: the next start restores from the checkpoint)")

    # ---- tasks --------------------------------------------------------------------------
    def _activate(self, instance: TaskInstance) -> None:
        """A task finished opening: commit a trimmed restore at once, then start its input."""
        assert self.consumer is not None
        if instance.storage.trimmed:
            self.commit([instance])  # make the trimmed state the committed one at once
            if instance.partition not in self.tasks:
                return
        tps = [TopicPartition(t, instance.partition, instance.next_offsets[t])
               for t in self.inputs]
        for tp in tps:
            self.consumer.seek(tp)
        self.consumer.resume(tps)
        log.info("task %s ready: restored %d records in %.1fs, input offsets %s",
                 instance.name, instance.metrics.restored_records, instance.metrics.restore_s,
                 instance.next_offsets)

    def _close_task(self, partition: int) -> None:
        """Close a task without committing: its open transaction (empty right after a
        commit) is aborted, its stores are closed as they are (the next open recovers them
        from the last commit)."""
        instance = self.tasks.pop(partition, None)
        if instance is None:
            return
        if self.metrics is not None:
            self.metrics.retire(instance)  # its counters outlive it
        try:
            instance.task.close()
        finally:
            instance.close_storage()
            instance.producer.abort_transaction(5)
            instance.producer.discard()

    def commit(self, tasks: list[TaskInstance] | None = None) -> None:
        """Commit ``tasks`` (default: all open); close the ones that failed, reopen later."""
        assert self.committer is not None
        tasks = list(self.tasks.values()) if tasks is None else tasks
        if tasks:
            for failure in self.committer.commit(tasks):
                self._commit_failed(failure)

    def _commit_failed(self, failure: CommitFailure) -> None:
        assert self.opener and self.consumer and self.membership
        t = failure.task
        hold = self.opener.hold_s if failure.hold else 0.0
        log.warning("transaction of task %s aborted, nothing of it is visible (%s); "
                    "restoring it from the checkpoint%s", t.name, failure.error,
                    " after the next rebalance" if hold else "")
        self._close_task(t.partition)
        self.consumer.pause(self.membership.inputs_of([t.partition]))
        self.opener.add(t.partition, hold)

    # ---- the loop ---------------------------------------------------------------------
    def _handle_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting at once (state is safe by the restore rules)")
            os._exit(128 + signum)
        log.info("signal %d: finishing the current batch, committing and closing", signum)
        self.stop()

    def stop(self) -> None:
        """Ask the loop to finish its batch, commit and return."""
        self._stop_requested = True
        if self.loop is not None:
            self.loop.stopping = True

    def run(self, install_signals: bool = True, early_signals: list[int] | None = None) -> None:
        """Run until a signal, ``coordinator.shutdown()``, or end of bounded inputs.

        ``early_signals``: signals the caller caught before the container existed; the
        container then stops at once, cleanly."""
        if install_signals:
            signal.signal(signal.SIGTERM, self._handle_signal)
            signal.signal(signal.SIGINT, self._handle_signal)
        for signum in early_signals or ():
            self._handle_signal(signum, None)
        if self._stop_requested:
            return  # stopped before it started: nothing to commit
        if self.metrics is not None:
            self.reporters = start_reporters(self._reporting, self.metrics)
        try:
            self._run()
        finally:
            for reporter in self.reporters:
                reporter.stop()

    def _run(self) -> None:
        admin = TopicAdmin(self.client_conf)
        self.restore_consumer = restore_consumer(self.consumer_conf, STATE_ISOLATION)
        topics = current_topics(admin, self.restore_consumer, self.config, self.checkpoint_topic)
        changelogs = {topics[name]: cfg for name, cfg in self.config.stores.items()
                      if name in topics}
        task_count = check_job_topics(admin, self.inputs, changelogs, self.checkpoint_topic,
                                      self.on_error.topic)
        self.side_inputs.check_partitions(admin.partition_count, task_count)
        context = self._open_context(
            OutputTopics(admin, task_count, self.client_conf["bootstrap.servers"]))
        self.backups = context.backups
        if self.metrics is not None:
            self.metrics.watch_backups(self.backups)
        self.opener = TaskOpener(lambda p: open_task(context, p),
                                 reopen_hold_s(self.consumer_conf))
        self.membership = Membership(self.inputs, self.tasks, self.opener, self.commit,
                                     self._close_task)
        conf = {
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            # Names this process in the group (`millpond status` shows it as the owner).
            "client.id": f"{self.group_id}@{socket.gethostname()}:{os.getpid()}",
            **self.consumer_conf, "group.id": self.group_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": self.guarantee.isolation,
            "enable.partition.eof": self.bounded,
        }
        self.consumer = clients.consumer(conf)
        self.committer = CommitProtocol(self.consumer, self.checkpoint_topic)
        job = self.config.job
        self.loop = RunLoop(
            self.consumer, self.tasks, self.opener, inputs=self.inputs, commit=self.commit,
            activate=self._activate, on_error=self.on_error, serdes_of=self.serdes.of_input,
            task_failed=lambda t, exc: self._commit_failed(CommitFailure(t, exc)),
            check=self._check, commit_every_s=job.commit_ms / 1000.0,
            window_every_s=job.window_ms / 1000.0 if job.window_ms > 0 else 0.0,
            bounded=self.bounded, status_every_s=self.status_every, task_count=task_count,
            end_grace_s=int(conf.get("heartbeat.interval.ms", 3000)) / 1000.0 + 1.0,
            tick=self.metrics.refresh if self.metrics is not None else None)
        self.loop.stopping = self._stop_requested
        self.membership.subscribe(self.consumer)
        try:
            try:
                self.loop.run()
            except MessageError as exc:
                if exc.stage == "deserialization":  # nothing partial: keep what came before
                    self.commit()
                raise
            self.commit()
        finally:
            self._shutdown()

    def _open_context(self, outputs: OutputTopics) -> OpenContext:
        assert self.restore_consumer is not None
        return OpenContext(
            self.config, self.guarantee, self.task_class, self.inputs, self.producer_conf,
            self.group_id, self.checkpoint_topic, self.restore_consumer, self.serdes.of,
            self.listener, outputs, self.side_inputs)

    def lag(self) -> dict[str, int]:
        """Messages left per task (high watermark minus next offset)."""
        return self.loop.lag() if self.loop is not None else {}

    def _shutdown(self) -> None:
        for t in self.tasks.values():
            log_task_summary(t)
        if self.opener is not None:
            self.opener.close()
        for p in list(self.tasks):
            self._close_task(p)
        if self.consumer is not None:
            self.consumer.close()
        if self.restore_consumer is not None:
            self.restore_consumer.close()
        if self.backups is not None:  # wait for uploads in flight while s3fs still works
            self.backups.close()


def run_job(config: Config, **kwargs: Any) -> Container:
    """Run a job in the foreground until it stops; returns the container for its metrics."""
    container = Container(config, **kwargs)
    container.run()
    return container

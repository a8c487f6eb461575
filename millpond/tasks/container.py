"""The container: hosts the tasks of the input partitions this process owns.

Every process of a job joins one consumer group (cooperative-sticky) on the job's first
input; task N also reads partition N of every other input. The container wires the parts:

* :class:`millpond.job.Job` holds the job's Kafka client settings, names and admin;
* :mod:`millpond.tasks.loading` imports the task and listener classes;
* :func:`millpond.kafka.admin.check_job_topics` checks and creates topics;
* :mod:`millpond.tasks.membership` joins the group and hands each rebalance to
* :mod:`millpond.tasks.manager`, which opens tasks (producer init, checkpoint, restore:
  :mod:`millpond.tasks.opening`), commits them (:mod:`millpond.tasks.commit`: one
  transaction per task, fenced by its transactional id), closes and reopens them;
* :mod:`millpond.tasks.runloop` polls, dispatches and windows, and asks the manager to
  open and commit;
* :mod:`millpond.tasks.deadletter` decides what a failed message does;
* :mod:`millpond.tasks.stream_serdes` builds the streams' serdes.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer

from millpond.changelog.generations import current_topics
from millpond.changelog.restore import RestoreListener
from millpond.config import Config
from millpond.config.memory import (
    FETCH_BYTES_KEY,
    FETCH_MAX_KEY,
    PRODUCER_MESSAGES_KEY,
    MemoryPlan,
    fetch_max_bytes,
    queued_messages,
)
from millpond.job import Job
from millpond.kafka import clients
from millpond.kafka.admin import OutputTopics, check_job_topics
from millpond.kafka.ends import LogEnds
from millpond.kafka.outage import OutageClock
from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS
from millpond.metrics import Reporter, parse_reporters, start_reporters
from millpond.query import Mailbox
from millpond.query.routing import client_id
from millpond.serdes import serdes_for
from millpond.sideinputs.runtime import SideInputs
from millpond.stores import RocksDbOptions
from millpond.stores.malloc import private_arenas
from millpond.streams.compile import (
    INTERNAL_TOPIC_CONFIG,
    check_stored_operators,
    has_app,
    internal_topics,
    with_app,
)
from millpond.tasks.commit import CommitProtocol
from millpond.tasks.deadletter import DeadLetterPolicy
from millpond.tasks.errors import MessageError
from millpond.tasks.input_reset import ResetPolicy
from millpond.tasks.instance import TaskInstance
from millpond.tasks.loading import load_restore_listener, load_task_class
from millpond.tasks.manager import TaskManager
from millpond.tasks.membership import subscribe
from millpond.tasks.memory import MemoryWatch
from millpond.tasks.opening import Fences, OpenContext, TaskOpener, open_task, reopen_hold_s
from millpond.tasks.purge import InternalTopicPurger
from millpond.tasks.queries import TaskDirectory
from millpond.tasks.runloop import LoopTiming, RunLoop
from millpond.tasks.startup import StartupTimeline
from millpond.tasks.stream_serdes import StreamSerdes
from millpond.tasks.telemetry import RuntimeMetrics

if TYPE_CHECKING:
    from millpond.backup import StateBackups
    from millpond.query.server import QueryServer

log = logging.getLogger("millpond.container")

STATUS_EVERY_S = 10.0
HEARTBEAT_MS = 500  # the group consumer's heartbeat.interval.ms unless the job sets it
# Seconds after a stop signal at which a process that still runs dumps every thread's stack
# (the fault tests give a stopping process 45 s).
STOP_DUMP_S = 30.0


def group_consumer_conf(consumer_conf: dict[str, Any], group_id: str, client: str,
                        isolation: str, bounded: bool) -> dict[str, Any]:
    """The job's group consumer settings: the job's ``systems.kafka.consumer.*`` over
    millpond's defaults, under the keys the run loop depends on."""
    return {
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        # A cooperative rebalance's second round waits for every member's next heartbeat:
        # librdkafka's 3 s made a moved task stand still 3 s each way (the handover bench).
        "heartbeat.interval.ms": HEARTBEAT_MS,
        # Names this process in the group (`millpond status` shows it as the owner). With
        # an endpoint, its URL too: how other processes route queries here.
        "client.id": client,
        **consumer_conf, "group.id": group_id,
        "partition.assignment.strategy": "cooperative-sticky",
        # An input position out of range (records deleted by retention before they were
        # read) comes back as an event: the run loop applies the job's policy
        # (systems.kafka.consumer.auto.offset.reset, millpond.tasks.input_reset), says so
        # and counts the skipped records instead of librdkafka resetting silently.
        "enable.auto.commit": False, "auto.offset.reset": "error",
        # read_committed for a dataflow's internal topics (written in transactions)
        "isolation.level": isolation,
        "enable.partition.eof": bounded,
    }


def input_fetch_conf(conf: dict[str, Any], plan: MemoryPlan, partitions: int,
                     user_fetch_bytes: bool, user_fetch_max: bool) -> dict[str, Any]:
    """``conf`` with the plan's fetch sizes for a process that may hold ``partitions``
    input partitions (:meth:`MemoryPlan.input_fetch`); the user's own keys are kept."""
    each, whole = plan.input_fetch(partitions)
    out = dict(conf)
    if not user_fetch_bytes:
        out[FETCH_BYTES_KEY] = each
    if not user_fetch_max:
        out[FETCH_MAX_KEY] = fetch_max_bytes(whole, out)
    return out


def rejoin_after_s(conf: dict[str, Any]) -> float:
    """How long a group consumer may wait for an assignment before the run loop replaces it:
    the group's rebalance timeout (``max.poll.interval.ms``) plus a session and a minute."""
    return (int(conf.get("max.poll.interval.ms", 300_000))
            + int(conf.get("session.timeout.ms", 45_000))) / 1000.0 + 60.0


class Container:
    """Runs a job's tasks in this process until shutdown."""

    def __init__(
        self, config: Config, *, bounded: bool | None = None,
        listener: RestoreListener | None = None, status_every: float = STATUS_EVERY_S,
        wait_timeout_s: float | None = None,
        job_status: Callable[[Job], Callable[[], dict[str, Any]]] | None = None,
        startup: StartupTimeline | None = None,
    ) -> None:
        # One malloc arena a thread, before any client starts its threads: glibc's shared ones
        # can put the input fetcher on the run loop's (millpond.stores.malloc).
        private_arenas()
        # Where the start-up's time goes, logged once (the CLI's runs from the process's start).
        self.startup = startup or StartupTimeline()
        self.config = config = with_app(config)  # a dataflow app: its task and stores
        job = config.job
        self.task_class = load_task_class(config)
        # Each store's serdes (a bad serde fails now, naming its key and line).
        self.store_serdes = {name: serdes_for(config, cfg)
                             for name, cfg in config.stores.items()}
        for cfg in config.stores.values():
            if cfg.factory == "rocksdb":  # so does a RocksDB value out of its range
                RocksDbOptions.from_store_properties(cfg.properties)
        if not job.inputs:
            raise config.missing("task.inputs", "every job reads at least one input",
                                 "task.inputs=kafka.page-views")
        self.inputs = [ref.topic for ref in job.inputs]
        self.job = Job(config)
        self._job_status = job_status
        self.faults = self.job.faults
        self.guarantee = self.job.guarantee
        self.client_conf = self.job.client_conf
        self.consumer_conf = self.job.consumer_conf
        self.producer_conf = self.job.producer_conf
        self.serdes = StreamSerdes(config)
        # What a task does when its input position no longer exists (a bad value fails now).
        self.reset_policy = ResetPolicy.of(config, internal_topics(config))
        self.side_inputs = SideInputs(config, self.consumer_conf, self.guarantee.isolation,
                                      self.serdes.of_input)
        self.inputs = self.side_inputs.task_inputs(self.inputs)
        self.bounded = bool(bounded if bounded is not None else config.get("task.bounded") == "true")
        self.listener = listener or load_restore_listener(config)
        self.status_every = status_every
        self.wait_timeout_s = wait_timeout_s  # how long to wait for Kafka at start (None: ever)
        self.group_id = self.job.group_id
        self.checkpoint_topic = self.job.checkpoint_topic
        self.tasks: dict[int, TaskInstance] = {}
        self._signals = 0
        self._stop_requested = False
        self.on_error = DeadLetterPolicy(config, lambda p: self.tasks[p].producer)
        self.consumer: Consumer | None = None
        self.restore_consumer: Consumer | None = None
        self.manager: TaskManager | None = None
        self.fences: Fences | None = None
        self.loop: RunLoop | None = None
        self.backups: StateBackups | None = None
        # Metrics reporters (metrics.reporters): validated now, started by run(). The
        # samples also feed the query endpoint's page (/status/process).
        reporting = parse_reporters(config.properties)
        self.metrics = (RuntimeMetrics(job.name, self.tasks, self.inputs,
                                       lambda: self.manager.opener if self.manager else None)
                        if reporting or job.query_address is not None else None)
        self._reporting = reporting
        self.reporters: list[Reporter] = []
        # Live queries (job.query.address): the endpoint listens from run() on and answers
        # 503 until the run loop serves the mailbox.
        self.queries = Mailbox() if job.query_address is not None else None
        self.query_server: QueryServer | None = None
        self.startup.mark("interpreter, imports and config")

    # ---- the loop ---------------------------------------------------------------------
    def _handle_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting at once (state is safe by the restore rules)")
            os._exit(128 + signum)
        log.info("signal %d: finishing the current batch, committing and closing", signum)
        # A stop that hangs says where: every thread's stack on stderr once, if the process
        # still runs this long after the signal (cancelled when the container has closed).
        faulthandler.dump_traceback_later(STOP_DUMP_S, exit=False)
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
            if self.queries is not None:
                # imported here: a job without job.query.address does not load the endpoint
                from millpond.query.page import StatusPage
                from millpond.query.routing import Owners, Router
                from millpond.query.server import QueryServer
                from millpond.tasks.queries import group_owners

                host, port = self.config.job.query_address or ("127.0.0.1", 0)
                token = self.config.job.query_token
                self.query_server = QueryServer(
                    host, port, self.store_serdes, self.queries, token=token,
                    linger_s=self.config.job.query_linger_ms / 1000)
                # Any process answers any key: the group's assignment finds the owner, whose
                # endpoint is in its client id (millpond.query.routing).
                self.query_server.router = Router(
                    Owners(group_owners(self.job)), self.config.job.partitioner,
                    self.query_server.url)
                self.query_server.router.token = token
                self.query_server.page = StatusPage(
                    self.config.job.name, self.query_server.url, self.metrics,
                    self._job_status(self.job) if self._job_status is not None else None,
                    self.query_server.router)
                self.query_server.start()
            self._run()
        finally:
            if self.query_server is not None:
                self.query_server.stop()
            for reporter in self.reporters:
                reporter.stop()

    def _run(self) -> None:
        admin = self.job.admin
        if not admin.wait_reachable(self.wait_timeout_s, log.warning,
                                    stopped=lambda: self._stop_requested):
            return  # a signal while waiting for Kafka: nothing was started
        self.startup.mark_once("Kafka reachable")
        if has_app(self.config):  # no renamed operator loses its state
            check_stored_operators(self.config, {
                store for ckpt in self.job.checkpoints().values() for store in ckpt.changelogs})
        self.restore_consumer = self.job.consumer()
        topics = current_topics(admin, self.restore_consumer, self.config, self.checkpoint_topic)
        changelogs = {topics[name]: cfg for name, cfg in self.config.stores.items()
                      if name in topics}
        internal = internal_topics(self.config)  # a dataflow's key_by topics
        task_count = check_job_topics(admin, self.inputs, changelogs, self.checkpoint_topic,
                                      self.on_error.topic,
                                      {topic: INTERNAL_TOPIC_CONFIG for topic in internal})
        self.side_inputs.check_partitions(admin.partition_count, task_count)
        self.startup.mark("the job's topics")
        if self.query_server is not None and self.query_server.router is not None:
            self.query_server.router.partitions = task_count  # keys route from now on
        # The plan's producer share is for every task producer this process can hold (all
        # of the job's tasks), not for each of them.
        self.producer_conf = task_producer_conf(self.producer_conf, self.config.memory,
                                                task_count)
        context = self._open_context(
            OutputTopics(admin, task_count, self.client_conf["bootstrap.servers"]))
        self.backups = context.backups
        if self.metrics is not None:
            self.metrics.watch_backups(self.backups)
        conf = group_consumer_conf(
            self._input_fetch(task_count * len(self.inputs)), self.group_id,
            client_id(self.group_id, socket.gethostname(), os.getpid(),
                      self.query_server.url if self.query_server else None),
            "read_committed" if internal else self.guarantee.isolation, self.bounded)
        self._consumer_conf = conf
        self.consumer = clients.consumer(conf)
        outage = OutageClock(self.config.job.timeout_ms / 1000.0,
                             self.client_conf["bootstrap.servers"])
        self.fences = fences = Fences(context.new_producer)
        opener = TaskOpener(lambda p: open_task(context, p, fences),
                            reopen_hold_s(self.consumer_conf), outage, fences)
        self.manager = manager = TaskManager(
            self.tasks, self.consumer, opener, CommitProtocol(self.consumer, self.checkpoint_topic),
            self.inputs, self.metrics)
        manager.startup = self.startup
        job = self.config.job
        timing = LoopTiming(
            commit_every_s=job.commit_ms / 1000.0,
            window_every_s=job.window_ms / 1000.0 if job.window_ms > 0 else 0.0,
            status_every_s=self.status_every, bounded=self.bounded, task_count=task_count,
            # (a bounded run's grace stays librdkafka's 3 s heartbeat + 1 s unless the job
            # sets heartbeat.interval.ms: it is a bound, waited only while partitions are away)
            end_grace_s=int(self.consumer_conf.get("heartbeat.interval.ms", 3000)) / 1000.0
            + 1.0,
            internal=tuple(internal),
            rejoin_after_s=rejoin_after_s(conf))
        self.loop = RunLoop(manager, inputs=self.inputs, serdes=self.serdes,
                            on_error=self.on_error, faults=self.faults, timing=timing,
                            metrics=self.metrics, rejoin=self._rejoin,
                            reset_policy=context.reset_policy,
                            memory=MemoryWatch(self.config.memory),
                            queries=(self.queries, TaskDirectory(manager, self.store_serdes))
                            if self.queries is not None else None,
                            purger=InternalTopicPurger(admin.admin, internal) if internal else None)
        self.loop.stopping = self._stop_requested
        subscribe(self.consumer, self.inputs[0], manager, self.faults)
        try:
            try:
                self.loop.run()
            except MessageError as exc:
                if exc.stage == "deserialization":  # nothing partial: keep what came before
                    manager.commit(final=True)
                raise
            manager.commit(final=True)
        finally:
            self._shutdown()

    def _rejoin(self) -> None:
        """Replace a group consumer that failed for good with a new one in the same group."""
        assert self.manager is not None and self.consumer is not None
        self.manager.wake.settle()  # it may be using the consumer
        clients.close_within(self.consumer, "failed group consumer")
        self.consumer = clients.consumer(self._consumer_conf)
        self.manager.replace_consumer(self.consumer)
        subscribe(self.consumer, self.inputs[0], self.manager, self.faults)

    def _input_fetch(self, partitions: int) -> dict[str, Any]:
        """The input consumer's settings with the plan's fetch sizes for ``partitions``."""
        return input_fetch_conf(self.consumer_conf, self.config.memory, partitions,
                                self.job.user_fetch_bytes, self.job.user_fetch_max)

    def _open_context(self, outputs: OutputTopics) -> OpenContext:
        assert self.restore_consumer is not None
        return OpenContext(
            self.config, self.guarantee, self.task_class, self.inputs, self.producer_conf,
            self.group_id, self.checkpoint_topic, self.restore_consumer, self.serdes.of,
            self.listener, outputs, self.side_inputs,
            reset_policy=self.reset_policy,
            ends=LogEnds(self.job.admin.admin, remake=lambda: clients.admin(self.client_conf)))

    def lag(self) -> dict[str, int]:
        """Messages left per task (high watermark minus next offset)."""
        return self.loop.lag() if self.loop is not None else {}

    def _shutdown(self) -> None:
        if self.queries is not None:  # before the stores close: waiting queries get a 503
            self.queries.close()
        if self.manager is not None:
            self.manager.shutdown()
        if self.fences is not None:
            self.fences.close()
        if self.consumer is not None:  # bounded: it may wait for ever on the coordinator
            clients.close_within(self.consumer, "group consumer")
        if self.restore_consumer is not None:
            self.restore_consumer.close()
        if self.backups is not None:  # wait for uploads in flight while s3fs still works
            self.backups.close()
        faulthandler.cancel_dump_traceback_later()


def run_job(config: Config, **kwargs: Any) -> Container:
    """Run a job in the foreground until it stops; returns the container for its metrics."""
    container = Container(config, **kwargs)
    container.run()
    return container


def task_producer_conf(conf: dict[str, Any], plan: MemoryPlan, tasks: int) -> dict[str, Any]:
    """``conf`` with each task producer's queue.buffering.max.kbytes for a job of ``tasks``
    tasks (:meth:`MemoryPlan.task_producer_buffer`), and its message count one a KiB of it
    (queue.buffering.max.messages: librdkafka's 100,000 tiny records took +23 MiB a
    producer, its byte bound counting their payload only); the user's own keys are kept."""
    out = dict(conf)
    if not plan.user_producer_buffer:
        try:
            largest = int(conf.get("message.max.bytes", 0))
        except (TypeError, ValueError):
            largest = 0
        out["queue.buffering.max.kbytes"] = max(1, plan.task_producer_buffer(tasks, largest)
                                                // 1024)
    if PRODUCER_MESSAGES_KEY not in conf:
        out[PRODUCER_MESSAGES_KEY] = queued_messages(
            int(str(out.get("queue.buffering.max.kbytes", 1024 * 1024))) * 1024)
    return out

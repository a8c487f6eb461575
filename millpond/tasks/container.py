"""The container: hosts the tasks of the input partitions this process owns.

Every process of a job joins one consumer group (cooperative-sticky) on the job's first
input; task N also reads partition N of every other input. The loop polls in batches,
dispatches by partition, runs ``window()`` on schedule, and commits every
``task.commit.ms``: flush stores -> wait for changelog and output delivery -> write
the checkpoint topic -> commit input offsets -> checkpoint each local store. Under
exactly-once each task commits through its own Kafka transaction instead.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from millpond.changelog.admin import TopicAdmin
from millpond.changelog.checkpoint import checkpoint_topic, read_checkpoints, task_name
from millpond.changelog.guarantees import Guarantee
from millpond.changelog.producer import TrackedProducer, log_client_error
from millpond.changelog.restore import (
    FETCH_QUEUE_BACKOFF_MS,
    RestoreListener,
    restore_consumer,
)
from millpond.config import Config, StreamRef
from millpond.serdes import build_serde
from millpond.tasks.api import StreamTask, TaskContext
from millpond.tasks.collector import KafkaCollector
from millpond.tasks.errors import MessageError, TaskConfigError, TaskError
from millpond.tasks.faults import abort_point, crash_point
from millpond.tasks.instance import TaskInstance
from millpond.tasks.storage import TaskStorage, serdes_for, store_topic

log = logging.getLogger("millpond.container")

POLL_BATCH = 1000
STATUS_EVERY_S = 10.0


def load_task_class(config: Config) -> type[StreamTask]:
    """Import ``task.class`` (``package.module.ClassName``, importable from the cwd)."""
    path = config.job.task_class
    if not path:
        raise TaskConfigError(f"{config.location('task.class')}: task.class is not set "
                              "(e.g. task.class=myjobs.Counter)")
    cls = _import(config, "task.class", path)
    if not (isinstance(cls, type) and issubclass(cls, StreamTask)):
        raise TaskConfigError(f"{config.location('task.class')}: task.class={path} is not a "
                              "millpond.StreamTask subclass")
    return cls


def load_restore_listener(config: Config) -> RestoreListener | None:
    """Instantiate ``task.restore.listener.class`` if set (callbacks around each restore)."""
    path = config.get("task.restore.listener.class")
    if not path:
        return None
    listener: RestoreListener = _import(config, "task.restore.listener.class", path)()
    return listener


def _import(config: Config, key: str, path: str) -> Any:
    where = config.location(key)
    module_name, _, cls_name = path.rpartition(".")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        return getattr(module, cls_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise TaskConfigError(f"{where}: {key}={path} cannot be imported: {exc}") from exc


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
            raise TaskConfigError(f"{config.location('task.inputs')}: task.inputs is empty")
        self.inputs = [ref.topic for ref in job.inputs]
        system = config.systems.get("kafka")
        bootstrap = system.bootstrap_servers if system else None
        if not bootstrap:
            raise TaskConfigError("systems.kafka.bootstrap.servers is not set")
        self._fatal: KafkaError | None = None
        self.client_conf: dict[str, Any] = {"bootstrap.servers": bootstrap,
                                            "error_cb": self._on_client_error}
        self.consumer_conf = {**self.client_conf, **(system.consumer if system else {})}
        self.producer_conf = {**self.client_conf, **(system.producer if system else {})}
        self.bounded = bool(bounded if bounded is not None else config.get("task.bounded") == "true")
        self.listener = listener or load_restore_listener(config)
        self.status_every = status_every
        self.group_id = f"{job.name}-{job.id}"
        self.checkpoint_topic = checkpoint_topic(job.name, job.id)
        self.tasks: dict[int, TaskInstance] = {}
        self.pending: set[int] = set()
        self._stop = False
        self._signals = 0
        self._eof: set[tuple[str, int]] = set()
        self._serdes: dict[str, tuple[Any, Any]] = {}
        self._last_commit = time.monotonic()
        self.partition_count = 0
        self.shared_producer: TrackedProducer | None = None
        self.consumer: Consumer | None = None
        self.restore_consumer: Consumer | None = None
        self.dlq_topic = job.dlq_stream.topic if job.dlq_stream else None

    def _on_client_error(self, err: KafkaError) -> None:
        log_client_error(err)
        if err.fatal() and self._fatal is None:
            self._fatal = err

    # ---- set-up -------------------------------------------------------------------
    def _check_topics(self) -> None:
        admin = TopicAdmin(self.client_conf)
        counts: dict[str, int] = {}
        for topic in self.inputs:
            n = admin.partition_count(topic)
            if n is None:
                raise TaskConfigError(f"input topic {topic} (task.inputs) does not exist")
            counts[topic] = n
        if len(set(counts.values())) != 1:
            raise TaskConfigError(
                "inputs must have equal partition counts (task N reads partition N of each): "
                + ", ".join(f"{t}={n}" for t, n in counts.items()))
        self.partition_count = next(iter(counts.values()))
        for cfg in self.config.stores.values():
            if cfg.changelog is not None:
                admin.ensure_compacted(store_topic(self.config, cfg), self.partition_count,
                                       cfg.changelog_replication_factor, cfg.changelog_topic_config)
        admin.ensure_compacted(self.checkpoint_topic, self.partition_count, what="checkpoint")
        if self.dlq_topic:
            admin.ensure_topic(self.dlq_topic, self.partition_count)

    def _stream_serdes(self, ref: StreamRef) -> tuple[Any, Any]:
        names = self.config.stream_serdes(ref)
        out = []
        for kind, name in zip(("key", "msg"), names, strict=True):
            key = f"systems.{ref.system}.streams.{ref.topic}.samza.{kind}.serde"
            out.append(build_serde(self.config.serde_spec(name, key)) if name else None)
        return out[0], out[1]

    def _input_serdes(self, topic: str) -> tuple[Any, Any]:
        hit = self._serdes.get(topic)
        if hit is None:
            hit = self._serdes[topic] = self._stream_serdes(StreamRef("kafka", topic))
        return hit

    # ---- rebalance ----------------------------------------------------------------
    def _all_inputs(self, partition: int, offset: int = OFFSET_BEGINNING) -> list[TopicPartition]:
        return [TopicPartition(t, partition, offset) for t in self.inputs]

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        tps = [tp for p in partitions for tp in self._all_inputs(p.partition)]
        consumer.incremental_assign(tps)
        consumer.pause(tps)
        self.pending.update(p.partition for p in partitions)
        log.info("assigned partitions %s", sorted(p.partition for p in partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = [p.partition for p in partitions]
        log.info("revoking partitions %s", revoked)
        ready = [self.tasks[p] for p in revoked if p in self.tasks]
        if ready:
            self.commit(ready)
        for p in revoked:
            self._close_task(p)
            self.pending.discard(p)
        consumer.incremental_unassign([tp for p in revoked for tp in self._all_inputs(p)])

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = [p.partition for p in partitions]
        log.warning("partitions %s were lost to another member; closing without commit", lost)
        for p in lost:
            self._close_task(p)
            self.pending.discard(p)
        consumer.incremental_unassign([tp for p in lost for tp in self._all_inputs(p)])

    # ---- tasks --------------------------------------------------------------------
    def _task_producer(self, partition: int) -> TrackedProducer:
        if self.guarantee.transactional:
            conf = {**self.producer_conf,
                    "transactional.id": f"{self.group_id}-{task_name(partition)}",
                    "transaction.timeout.ms": 60_000, "message.timeout.ms": 50_000}
            producer = TrackedProducer(conf)
            producer.init_transactions()  # fences the previous owner, aborts its open txn
            return producer
        if self.shared_producer is None:
            self.shared_producer = TrackedProducer(self.producer_conf)
        return self.shared_producer

    def _open_task(self, partition: int) -> None:
        assert self.consumer is not None and self.restore_consumer is not None
        producer = self._task_producer(partition)
        checkpoints = read_checkpoints(self.restore_consumer, self.checkpoint_topic, [partition])
        ckpt = checkpoints.get(task_name(partition))
        began = time.monotonic()
        storage = TaskStorage.open(
            self.config, partition, self.guarantee, producer, self.restore_consumer,
            ckpt.changelogs if ckpt else None, self.listener)
        collector = KafkaCollector(producer, self._stream_serdes)
        next_offsets = dict(ckpt.inputs) if ckpt else {}
        instance = TaskInstance(partition, self.task_class(), storage, producer, collector,
                                next_offsets)
        for s in storage.stores.values():
            if s.recovery is not None:
                instance.metrics.restored_records += s.recovery.stats.records
        instance.metrics.restore_s = time.monotonic() - began
        context = TaskContext(task_name(partition), partition, self.config, storage.user_stores())
        instance.task.init(context)
        if self.guarantee.transactional:
            producer.begin_transaction()
        self.tasks[partition] = instance
        if storage.trimmed:
            self.commit([instance])  # make the trimmed state the committed one at once
        self._warn_on_lost_input(partition, next_offsets)
        tps = [TopicPartition(t, partition, next_offsets.get(t, OFFSET_BEGINNING))
               for t in self.inputs]
        for tp in tps:
            self.consumer.seek(tp)
        self.consumer.resume(tps)
        for t in self.inputs:
            self._eof.discard((t, partition))
        log.info("task %s ready: restored %d records in %.1fs, input offsets %s",
                 instance.name, instance.metrics.restored_records, instance.metrics.restore_s,
                 next_offsets or "from the beginning")

    def _warn_on_lost_input(self, partition: int, next_offsets: dict[str, int]) -> None:
        """Say loudly when input the checkpoint still needs was deleted (e.g. by retention)."""
        assert self.restore_consumer is not None
        for topic, offset in next_offsets.items():
            low, high = self.restore_consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=30)
            if offset < low:
                log.warning("input %s[%d]: the checkpoint resumes at offset %d but the topic "
                            "now starts at %d; %d unprocessed records were deleted (retention?) "
                            "and are skipped", topic, partition, offset, low, low - offset)
            elif offset > high:
                log.warning("input %s[%d]: the checkpoint resumes at offset %d beyond the end "
                            "%d (topic recreated?); consuming from the end", topic, partition,
                            offset, high)

    def _close_task(self, partition: int) -> None:
        instance = self.tasks.pop(partition, None)
        if instance is None:
            return
        try:
            instance.task.close()
        finally:
            instance.storage.close()
            if instance.producer is not self.shared_producer:
                instance.producer.close(5)

    # ---- errors ---------------------------------------------------------------------
    def _on_message_error(self, stage: str, msg: Message, exc: BaseException) -> bool:
        topic, partition, offset = msg.topic() or "?", msg.partition() or 0, msg.offset() or 0
        error = MessageError(topic, partition, offset, exc, stage)
        if self.dlq_topic:
            producer = self.tasks[partition].producer
            headers = [("millpond.error", str(error).encode()), ("millpond.topic", topic.encode()),
                       ("millpond.partition", str(partition).encode()),
                       ("millpond.offset", str(offset).encode()), ("millpond.stage", stage.encode())]
            producer.send(self.dlq_topic, None, msg.key(), msg.value(), headers)
            log.warning("sent to dead-letter topic %s: %s", self.dlq_topic, error)
            return True
        if stage == "deserialization" and self.config.job.drop_deserialization_errors:
            log.warning("dropped: %s", error)
            return True
        raise error

    # ---- commit -----------------------------------------------------------------------
    def commit(self, tasks: list[TaskInstance] | None = None) -> None:
        """Commit ``tasks`` (default: all ready) through the checkpoint sequence."""
        tasks = list(self.tasks.values()) if tasks is None else tasks
        if not tasks:
            return
        began = time.monotonic()
        if self.guarantee.transactional:
            for t in tasks:
                self._commit_transactional(t)
        else:
            self._commit_plain(tasks)
        elapsed = time.monotonic() - began
        for t in tasks:
            t.metrics.commits += 1
            t.metrics.commit_s += elapsed
            t.coordinator.commit_requested = False
        self._last_commit = time.monotonic()

    def _offsets(self, tasks: list[TaskInstance]) -> list[TopicPartition]:
        return [TopicPartition(topic, t.partition, off)
                for t in tasks for topic, off in t.next_offsets.items()]

    def _commit_plain(self, tasks: list[TaskInstance]) -> None:
        assert self.shared_producer is not None and self.consumer is not None
        producer = self.shared_producer
        crash_point("before-flush")
        for t in tasks:
            t.storage.flush()
        crash_point("after-flush")
        producer.flush_and_check()
        crash_point("after-changelog-delivered")
        for t in tasks:
            producer.send(self.checkpoint_topic, t.partition, t.name.encode(),
                          t.checkpoint().to_bytes())
        producer.flush_and_check()
        crash_point("after-checkpoint-topic")
        offsets = self._offsets(tasks)
        if offsets:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:  # informational only: the checkpoint topic rules
                log.warning("committing offsets to group %s failed: %s", self.group_id, exc)
        crash_point("after-offsets-commit")
        for t in tasks:
            t.storage.after_commit()
        crash_point("after-local-checkpoint")

    def _commit_transactional(self, t: TaskInstance) -> None:
        assert self.consumer is not None
        producer = t.producer
        crash_point("before-flush")
        t.storage.flush()
        crash_point("after-flush")
        try:
            producer.flush_and_check()
            crash_point("after-changelog-delivered")
            producer.send(self.checkpoint_topic, t.partition, t.name.encode(),
                          t.checkpoint().to_bytes())
            crash_point("after-checkpoint-topic")
            offsets = self._offsets([t])
            if offsets:
                producer.send_offsets(offsets, self.consumer.consumer_group_metadata())
            abort_point()
            producer.commit_transaction()
        except KafkaException as exc:
            error = exc.args[0]
            if not error.txn_requires_abort():
                raise
            log.warning("transaction of task %s aborted (%s); restoring it from the checkpoint",
                        t.name, error.str())
            producer.abort_transaction()
            self._reset_task(t)
            return
        crash_point("after-offsets-commit")
        t.storage.after_commit()
        crash_point("after-local-checkpoint")
        producer.begin_transaction()

    def _reset_task(self, t: TaskInstance) -> None:
        """Roll an aborted task back to its last commit: reopen stores from the checkpoint."""
        assert self.consumer is not None
        self._close_task(t.partition)
        tps = self._all_inputs(t.partition)
        self.consumer.pause(tps)
        self.pending.add(t.partition)

    # ---- the loop ---------------------------------------------------------------------
    def _handle_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            log.warning("second signal: exiting at once (state is safe by the restore rules)")
            os._exit(130)
        log.info("signal %d: finishing the current batch, committing and closing", signum)
        self._stop = True

    def stop(self) -> None:
        """Ask the loop to finish its batch, commit and return."""
        self._stop = True

    def run(self, install_signals: bool = True) -> None:
        """Run until a signal, ``coordinator.shutdown()``, or end of bounded inputs."""
        if install_signals:
            signal.signal(signal.SIGTERM, self._handle_signal)
            signal.signal(signal.SIGINT, self._handle_signal)
        self._check_topics()
        self.restore_consumer = restore_consumer(self.consumer_conf, self.guarantee.isolation)
        conf = {
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            **self.consumer_conf, "group.id": self.group_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": self.guarantee.isolation,
            "enable.partition.eof": self.bounded,
        }
        self.consumer = Consumer(conf)
        self.consumer.subscribe([self.inputs[0]], on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_lost)
        try:
            try:
                self._loop()
            except MessageError as exc:
                if exc.stage == "deserialization":  # nothing partial: keep what came before
                    self.commit()
                raise
            if self.tasks:
                self.commit()
        finally:
            self._shutdown()

    def _loop(self) -> None:
        assert self.consumer is not None
        consume = self.consumer.consume
        commit_every = self.config.job.commit_ms / 1000.0
        window_every = self.config.job.window_ms / 1000.0 if self.config.job.window_ms > 0 else 0
        last_status = time.monotonic()
        processed_at_status = 0
        tasks = self.tasks
        on_error = self._on_message_error
        serdes_of = self._input_serdes
        while not self._stop:
            if self._fatal is not None:
                raise TaskError(f"fatal Kafka client error, stopping: {self._fatal.str()} "
                                "(state is safe: the next start restores from the checkpoint)")
            msgs = consume(POLL_BATCH, 0.1)
            while self.pending:
                self._open_task(self.pending.pop())
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
                    done += task.handle_batch(run[done:] if done else run, serdes_of, on_error)
                    if task.coordinator.shutdown_requested:
                        self._stop = True
                        break
                    if task.coordinator.commit_requested:
                        self.commit([task])
            if msgs:
                crash_point("mid-batch")
            now = time.monotonic()
            if window_every:
                for t in list(tasks.values()):
                    if now - t.last_window >= window_every:
                        t.last_window = now
                        t.task.window(t.collector, t.coordinator)
            if now - self._last_commit >= commit_every:
                self.commit()
            if any(t.coordinator.shutdown_requested for t in tasks.values()):
                self._stop = True
            if self.bounded and tasks and not self.pending and self._at_end():
                for t in tasks.values():
                    t.task.on_end_of_stream(t.collector, t.coordinator)
                self._stop = True
            if now - last_status >= self.status_every:
                done = sum(t.metrics.processed for t in tasks.values())
                rate = (done - processed_at_status) / (now - last_status)
                log.info("status: %.0f msg/s, tasks %s, lag %s", rate, sorted(tasks),
                         self.lag())
                last_status, processed_at_status = now, done

    def _at_end(self) -> bool:
        return all((t, p) in self._eof for p in self.tasks for t in self.inputs)

    def lag(self) -> dict[str, int]:
        """Messages left per task (high watermark minus next offset), from cached watermarks."""
        assert self.consumer is not None
        out = {}
        for p, t in self.tasks.items():
            total = 0
            for topic in self.inputs:
                try:
                    _, high = self.consumer.get_watermark_offsets(
                        TopicPartition(topic, p), cached=True)
                except KafkaException:
                    continue
                if high >= 0:
                    total += max(0, high - t.next_offsets.get(topic, 0))
            out[t.name] = total
        return out

    def _shutdown(self) -> None:
        for t in self.tasks.values():
            m = t.metrics
            log.info("task %s: processed %d, skipped %d, process %.1f us/msg, %d commits "
                     "(%.1f ms avg), restored %d records in %.2fs", t.name, m.processed,
                     m.skipped, m.process_latency_us, m.commits,
                     1000 * m.commit_s / m.commits if m.commits else 0.0,
                     m.restored_records, m.restore_s)
        for p in list(self.tasks):
            self._close_task(p)
        if self.consumer is not None:
            self.consumer.close()
        if self.restore_consumer is not None:
            self.restore_consumer.close()
        if self.shared_producer is not None:
            self.shared_producer.close()


def run_job(config: Config, **kwargs: Any) -> Container:
    """Run a job in the foreground until it stops; returns the container for its metrics."""
    container = Container(config, **kwargs)
    container.run()
    return container


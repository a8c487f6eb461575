"""The Kafka side of writing a store's state: has the job run, the changelog, checkpoints.

No Spark here: :func:`inspect` reads what exists (task count, checkpoints, the changelog's
watermarks, local store directories), :meth:`Target.refuse_unless` decides whether writing
state is allowed, :meth:`Target.create_topics` creates the changelog as a running job would
(compacted, one partition per task, the store's replication and topic configs) and the
checkpoint topic, and :meth:`Target.write_checkpoints` re-points every task's checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from millpond.changelog import local
from millpond.changelog.checkpoint import NO_OFFSET, OFFSET_FILE, Checkpoint, task_name
from millpond.changelog.errors import ChangelogError
from millpond.config import Config, StoreConfig
from millpond.job import Job
from millpond.kafka.errors import KafkaClientError
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import watermarks
from millpond.ops.offline import group_active
from millpond.spark.errors import BootstrapError


@dataclass
class Target:
    """A job's store as it is in Kafka (and on this machine) before its state is written."""

    job: Job
    store: StoreConfig
    topic: str  # the store's changelog
    tasks: int  # the job's input partition count: task p owns changelog partition p
    checkpoints: dict[str, Checkpoint]
    marks: dict[int, tuple[int, int]] | None  # changelog (low, high) per partition; None: no topic
    local_dirs: list[Path]  # this store's local directories that hold a store

    @property
    def config(self) -> Config:
        return self.job.config

    def has_run(self) -> list[str]:
        """Why the job counts as having run (empty if it never did)."""
        reasons = []
        if self.checkpoints:
            reasons.append(f"{len(self.checkpoints)} task checkpoint(s) in "
                           f"{self.job.checkpoint_topic}")
        written = {p: high for p, (_, high) in (self.marks or {}).items() if high > 0}
        if written:
            reasons.append(f"changelog {self.topic} is not empty (end offsets "
                           f"{dict(sorted(written.items()))})")
        if self.local_dirs:
            reasons.append(f"local store directories exist ({', '.join(map(str, self.local_dirs[:3]))}"
                           f"{' ...' if len(self.local_dirs) > 3 else ''})")
        return reasons

    def refuse_unless(self, replace: bool) -> None:
        """Raise BootstrapError if a process of the job is running, or if the job has run
        and ``replace`` is not set."""
        group = f"{self.config.job.name}-{self.config.job.id}"
        if group_active(self.job):
            raise BootstrapError(f"job {self.config.job.name} is running: consumer group "
                                 f"{group} has live members; stop every process first")
        reasons = self.has_run()
        if reasons and not replace:
            raise BootstrapError(
                f"job {self.config.job.name} has run: {'; '.join(reasons)}. Bootstrapping "
                f"would mix the new state with the old; use --replace to make store "
                f"{self.store.name!r} hold exactly the new state")

    def create_topics(self) -> None:
        """Create the changelog and checkpoint topics as a starting job does (or check them)."""
        try:
            self.job.admin.ensure_compacted(self.topic, self.tasks,
                                            self.store.changelog_replication_factor,
                                            self.store.changelog_topic_config)
            self.job.admin.ensure_compacted(self.job.checkpoint_topic, self.tasks,
                                            what="checkpoint")
        except (ChangelogError, KafkaClientError) as exc:
            raise BootstrapError(str(exc)) from exc

    def ends(self) -> dict[int, int]:
        """Each changelog partition's committed end now (0 for a topic not created yet)."""
        if self.marks is None:
            return {p: 0 for p in range(self.tasks)}
        return {p: high for p, (_, high) in self.marks.items()}

    def write_checkpoints(self, offsets: dict[int, int]) -> dict[str, Checkpoint]:
        """Set store's changelog offset of every task to ``offsets[p]``, keeping the rest of
        an existing checkpoint (input offsets, other stores); a new one has no input
        offsets, so its task starts its inputs where a new job would (their start)."""
        producer = TrackedProducer(self.job.producer_conf)
        written: dict[str, Checkpoint] = {}
        try:
            for p in range(self.tasks):
                old = self.checkpoints.get(task_name(p))
                ckpt = Checkpoint(task_name(p), p, dict(old.inputs) if old else {},
                                  dict(old.changelogs) if old else {},
                                  dict(old.side_inputs) if old else {},
                                  dict(old.topics) if old else {})
                ckpt.changelogs[self.store.name] = offsets.get(p, NO_OFFSET)
                producer.send(self.job.checkpoint_topic, p, ckpt.task.encode(), ckpt.to_bytes())
                written[ckpt.task] = ckpt
            producer.flush_and_check()
        except (ChangelogError, KafkaClientError) as exc:
            raise BootstrapError(f"writing checkpoints to {self.job.checkpoint_topic}: "
                                 f"{exc}") from exc
        finally:
            producer.discard()
        return written

    def verify_covered(self, offsets: dict[int, int]) -> None:
        """Check that each partition's committed end is past its checkpointed offset, so a
        task restoring to the checkpoint (effectively-once) or to the end reads it all.

        A transaction a killed exactly-once process left open holds the end a
        ``read_committed`` reader sees (the last stable offset) below the records written
        after it until the broker aborts it, ``transaction.timeout.ms`` after it began:
        wait that long (bounded) before giving up."""
        commit_ms = self.config.job.commit_ms
        wait_s = min(900_000, max(60_000, 2 * commit_ms + 30_000)) / 1000 + 15
        deadline = time.monotonic() + wait_s
        consumer = self.job.consumer()
        try:
            for p, offset in sorted(offsets.items()):
                while True:
                    _, high = watermarks(consumer, self.topic, p)
                    if offset < high:
                        break
                    if time.monotonic() > deadline:
                        raise BootstrapError(
                            f"changelog {self.topic}[{p}] ends at {high} for read_committed "
                            f"readers after {wait_s:.0f}s but its checkpoint would name offset "
                            f"{offset}: an open transaction holds it back. Run again with "
                            "--replace once it has been aborted")
                    time.sleep(0.5)
        finally:
            consumer.close()


def inspect(config: Config, store: str) -> Target:
    """Read what exists of ``store``'s job in Kafka and on this machine."""
    try:
        job = Job(config)
        cfg = job.store(store)
    except (ChangelogError, KafkaClientError) as exc:
        raise BootstrapError(str(exc)) from exc
    if cfg.changelog is None:
        raise BootstrapError(f"store {store!r} has no changelog (stores.{store}.changelog): "
                             "its tasks could not restore bootstrapped state")
    try:
        tasks = len(job.partitions_of_inputs())
    except (ChangelogError, KafkaClientError) as exc:
        raise BootstrapError(f"{exc}: the job's input partition count decides where each "
                             "key goes; create the input topics first") from exc
    checkpoints = job.checkpoints()
    try:
        topic = job.changelog(cfg, checkpoints)
    except (ChangelogError, KafkaClientError) as exc:
        raise BootstrapError(str(exc)) from exc
    marks = None
    if job.admin.partition_count(topic) is not None:
        consumer = job.consumer()
        try:
            from millpond.spark.source import topic_partitions

            marks = {p: watermarks(consumer, topic, p) for p in topic_partitions(consumer, topic)}
        finally:
            consumer.close()
    base = config.job.logged_store_base_dir
    dirs = [d for d in (local.store_dir(base, config.job.name, store, p) for p in range(tasks))
            if (d / OFFSET_FILE).exists() or (d.is_dir() and any(d.iterdir()))]
    return Target(job, cfg, topic, tasks, checkpoints, marks, dirs)

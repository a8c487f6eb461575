"""The Kafka side of a rescale: may the job be rescaled, the new topics, the new checkpoints.

No Spark here. :func:`inspect_rescale` checks that the job is stopped (its consumer group
is empty), that every input now has ``M`` partitions (more than the ``N`` tasks the job has
run with) and that the job is drained: every task's checkpoint is at the end of its input
partitions, so no input record is left in an old partition that, after the rescale, would
be processed by a task that no longer holds its key's state. :meth:`RescalePlan.commit`
writes the ``M`` checkpoints in one transaction, so a job never sees half a rescale.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from millpond.changelog.checkpoint import NO_OFFSET, Checkpoint, task_name
from millpond.changelog.errors import ChangelogError
from millpond.changelog.generations import job_topics, next_generation, resolve
from millpond.config import Config, StoreConfig
from millpond.job import Job
from millpond.kafka.errors import KafkaClientError
from millpond.kafka.producer import TrackedProducer
from millpond.kafka.reading import watermarks
from millpond.ops.describe import records_after
from millpond.ops.offline import group_active
from millpond.spark.errors import RescaleError

UNDRAINED_SHOWN = 5


@dataclass
class StoreMove:
    """One store's changelog generations: read ``old`` at the checkpoint, write ``new``."""

    store: StoreConfig
    old: str
    new: str


@dataclass
class RescalePlan:
    """What a rescale from ``before`` to ``after`` tasks will read and write."""

    job: Job
    before: int  # N: tasks (partitions) the job ran with
    after: int  # M: the inputs' partition count now
    inputs: list[str]
    ends: dict[str, dict[int, int]]  # input -> old partition -> next offset to read (its end)
    checkpoints: dict[str, Checkpoint]
    moves: list[StoreMove] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # side-input stores (refilled per task)

    @property
    def config(self) -> Config:
        return self.job.config

    def create_topics(self) -> None:
        """Create each store's new generation (compacted, ``after`` partitions, the store's
        replication and topic configs, as a job creates changelogs); refuse one that holds
        records already (a failed earlier rescale: the user deletes it and runs again)."""
        admin = self.job.admin
        consumer = self.job.consumer()
        try:
            for move in self.moves:
                if admin.partition_count(move.new) is not None:
                    counts = [watermarks(consumer, move.new, p)[1]
                              for p in range(admin.partition_count(move.new) or 0)]
                    if any(counts):
                        raise RescaleError(
                            f"changelog generation {move.new} of store {move.store.name!r} "
                            f"exists and holds records (an earlier rescale that failed "
                            f"before its checkpoints?); delete it and run rescale again")
                admin.ensure_compacted(move.new, self.after,
                                       move.store.changelog_replication_factor,
                                       move.store.changelog_topic_config)
        except (ChangelogError, KafkaClientError) as exc:
            raise RescaleError(str(exc)) from exc
        finally:
            consumer.close()

    def verify_written(self, move: StoreMove, last: dict[int, int]) -> None:
        """Each new partition's end is past the offset its checkpoint will name."""
        consumer = self.job.consumer()
        try:
            for p, offset in sorted(last.items()):
                high = watermarks(consumer, move.new, p)[1]
                if offset >= high:
                    raise RescaleError(f"changelog {move.new}[{p}] ends at {high} but "
                                       f"offset {offset} was acknowledged")
        finally:
            consumer.close()

    def new_checkpoints(self, written: dict[str, dict[int, int]]) -> list[Checkpoint]:
        """The ``after`` checkpoints: old partitions' inputs at their ends, new ones at 0;
        each store at the last offset written to its new partition, in its new topic."""
        out = []
        for p in range(self.after):
            old = self.checkpoints.get(task_name(p)) if p < self.before else None
            inputs = {t: self.ends[t][p] if p < self.before else 0 for t in self.inputs}
            changelogs = dict(old.changelogs) if old else {}
            topics = dict(old.topics) if old else {}
            for move in self.moves:
                changelogs[move.store.name] = written[move.store.name].get(p, NO_OFFSET)
                topics[move.store.name] = move.new
            out.append(Checkpoint(task_name(p), p, inputs, changelogs,
                                  dict(old.side_inputs) if old else {}, topics))
        return out

    def commit(self, checkpoints: list[Checkpoint]) -> None:
        """Grow the checkpoint topic to ``after`` partitions (task p writes partition p) and
        write every checkpoint in one transaction: all of the rescale or none of it."""
        if group_active(self.job):
            raise RescaleError(_running(self.config))
        try:
            self.job.admin.add_partitions(self.job.checkpoint_topic, self.after)
        except (ChangelogError, KafkaClientError) as exc:
            raise RescaleError(str(exc)) from exc
        conf = {**self.job.producer_conf,
                "transactional.id": self.job.rescale_transactional_id,
                "transaction.timeout.ms": 60_000, "message.timeout.ms": 50_000}
        producer = TrackedProducer(conf)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            for ckpt in checkpoints:
                producer.send(self.job.checkpoint_topic, ckpt.partition, ckpt.task.encode(),
                              ckpt.to_bytes())
            producer.flush_and_check()
            producer.commit_transaction()
        except (ChangelogError, KafkaClientError) as exc:
            producer.abort_transaction(5)
            raise RescaleError(f"writing checkpoints to {self.job.checkpoint_topic}: "
                               f"{exc}; nothing was committed, the job is as before") from exc
        finally:
            producer.discard()


def _running(config: Config) -> str:
    return (f"job {config.job.name} is running: consumer group {config.job.name}-"
            f"{config.job.id} has live members; stop every process first")


def inspect_rescale(config: Config, partitions: int) -> RescalePlan:
    """Check that the job can be rescaled to ``partitions`` tasks; what the rescale does."""
    try:
        job = Job(config)
        return _inspect(job, partitions)
    except (ChangelogError, KafkaClientError) as exc:
        raise RescaleError(str(exc)) from exc


def _inspect(job: Job, after: int) -> RescalePlan:
    config = job.config
    if group_active(job):
        raise RescaleError(_running(config))
    inputs = [ref.topic for ref in config.job.inputs]
    counts = {t: job.admin.partition_count(t) for t in inputs}
    wrong = {t: n for t, n in counts.items() if n != after}
    if wrong:
        raise RescaleError(
            f"--partitions {after}: every input must have {after} partitions first (add them "
            f"with kafka-topics --alter --partitions {after}); now "
            + ", ".join(f"{t}={'missing' if n is None else n}" for t, n in wrong.items()))
    before = job.admin.partition_count(job.checkpoint_topic)
    if before is None:
        raise RescaleError(f"job {config.job.name} has no checkpoint topic "
                           f"{job.checkpoint_topic}: it never ran, so there is no state to "
                           f"rescale; just run it on {after} partitions")
    if after <= before:
        raise RescaleError(f"--partitions {after}: the job already has {before} tasks; "
                           "rescale only grows a job")
    checkpoints = job.checkpoints()
    ends = _drained_ends(job, inputs, before, checkpoints)
    plan = RescalePlan(job, before, after, inputs, ends, checkpoints)
    overrides = job_topics(checkpoints.values())
    for cfg in config.stores.values():
        if cfg.side_inputs:
            plan.skipped.append(cfg.name)
            continue
        if cfg.changelog is None:
            if cfg.factory == "inmemory":
                continue  # holds nothing across restarts
            raise RescaleError(f"store {cfg.name!r} has no changelog: its state lives only "
                               "in local directories and cannot be moved to new partitions")
        old = resolve(config, cfg, overrides)
        n = job.admin.partition_count(old)
        if n is None:
            raise RescaleError(f"changelog {old} of store {cfg.name!r} does not exist")
        if n != before:
            raise RescaleError(f"changelog {old} of store {cfg.name!r} has {n} partitions but "
                               f"the job has {before} tasks")
        plan.moves.append(StoreMove(cfg, old, next_generation(config, cfg, old)))
    return plan


def _drained_ends(job: Job, inputs: list[str], before: int,
                  checkpoints: dict[str, Checkpoint]) -> dict[str, dict[int, int]]:
    """Per input and old partition, the offset the job resumes at; RescaleError naming the
    partitions with committed records after their task's checkpoint."""
    ends: dict[str, dict[int, int]] = {t: {} for t in inputs}
    undrained: list[str] = []
    total = 0
    consumer = job.consumer()
    try:
        for p in range(before):
            ckpt = checkpoints.get(task_name(p))
            for topic in inputs:
                low, high = watermarks(consumer, topic, p)
                at = ckpt.inputs.get(topic) if ckpt else None
                start = low if at is None else at
                # Count records rather than compare offsets: transaction markers take
                # offsets too, so a drained transactional input may end past the checkpoint.
                left = records_after(consumer, topic, p, start - 1, low, high) if start < high else 0
                if left:
                    total += left
                    undrained.append(f"{topic}[{p}]: checkpoint at "
                                     f"{'none' if at is None else at}, end {high}, {left} "
                                     "unprocessed")
                ends[topic][p] = max(start, low) if at is not None else high
    finally:
        consumer.close()
    if undrained:
        shown = "; ".join(undrained[:UNDRAINED_SHOWN])
        more = f" (and {len(undrained) - UNDRAINED_SHOWN} more)" if len(undrained) > UNDRAINED_SHOWN else ""
        raise RescaleError(
            f"job {job.config.job.name} is not drained: {total} input record(s) after the "
            f"checkpoints: {shown}{more}. Run the job with --bounded until it stops, then "
            "rescale (rescaling undrained input would process records of moved keys in the "
            "wrong task)")
    return ends

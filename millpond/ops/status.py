"""``millpond status``: where a job stands, from Kafka alone, whether it runs or not.

Per task partition: the group member that owns it (from the consumer group's member
assignments), the input offsets the task resumes from (its checkpoint: the checkpoint topic,
not the group's offsets, is what a task seeks to when it opens), the inputs' end offsets and
lag, the last checkpoint's time and changelog offsets, and per logged store the changelog's
end offset and, when the job's state directory is on this machine, whether the local store
is clean (an ``OFFSET`` file), dirty (writes after the last commit) or absent; with
``job.state.backup.uri`` set, each backed-up store's newest snapshot in the bucket. The store
rows are ``changelog describe``'s (:func:`millpond.tasks.describe.describe`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from millpond.backup.status import SnapshotStatus
from millpond.changelog import local
from millpond.changelog.checkpoint import Checkpoint, task_name
from millpond.kafka.reading import watermarks
from millpond.ops.describe import PartitionInfo, describe
from millpond.ops.errors import JobNeverRanError
from millpond.ops.offline import Job


@dataclass
class Owner:
    """The consumer group member a task partition is assigned to."""

    client_id: str
    host: str
    member_id: str
    instance_id: str | None = None


@dataclass
class GroupInfo:
    """The job's consumer group: its id, state and member count."""

    group: str
    state: str
    members: int


@dataclass
class StoreStatus:
    """One logged store of a task: changelog end and checkpointed offsets, local copy."""

    store: str
    changelog: str
    end: int  # the changelog's high watermark
    checkpointed: int | None  # last changelog offset in the task's checkpoint
    local: str | None  # "clean", "dirty", "absent"; None when the state dir is not here
    local_offset: int | None  # the OFFSET file's changelog offset (clean stores)
    local_lag: int | None  # committed changelog records the clean local store lacks
    backup: SnapshotStatus | None = None  # newest snapshot; None when not backed up


@dataclass
class PartitionStatus:
    """One task partition: ``millpond status``'s row (its JSON object)."""

    partition: int
    task: str
    owner: Owner | None
    committed: dict[str, int | None]  # input -> next offset the task resumes from
    end: dict[str, int]  # input -> end offset (high watermark)
    lag: int  # total over inputs of end - resume position
    checkpoint: dict[str, Any] | None  # time, inputs, changelogs of the last checkpoint
    stores: list[StoreStatus] = field(default_factory=list)
    # input -> records the task skipped so far because its position no longer existed
    # (deleted by retention before it read them; its checkpoint's count)
    skipped: dict[str, int] = field(default_factory=dict)
    # input -> records the checkpoint still needs that Kafka deleted (below the log start):
    # the task's auto.offset.reset policy applies when it next opens
    deleted: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def describe_group(job: Job) -> tuple[GroupInfo, dict[int, Owner]]:
    """The group's state and, per task partition, the member it is assigned to (the
    container subscribes to the first input only, so its partitions are the tasks')."""
    group = job.group_id
    first = job.config.job.inputs[0].topic
    desc = job.admin.describe_group(group)
    if desc is None:  # a group that does not exist (yet) has no owners
        return GroupInfo(group, "none", 0), {}
    owners: dict[int, Owner] = {}
    for m in desc.members:
        owner = Owner(m.client_id, m.host, m.member_id, m.group_instance_id)
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        for tp in tps:
            if tp.topic == first:
                owners[tp.partition] = owner
    state = getattr(desc.state, "name", str(desc.state)).lower()
    return GroupInfo(group, state, len(desc.members)), owners


def _checkpoint_doc(ckpt: Checkpoint | None) -> dict[str, Any] | None:
    if ckpt is None:
        return None
    when = None
    if ckpt.timestamp_ms is not None:
        when = datetime.fromtimestamp(ckpt.timestamp_ms / 1000, UTC).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    return {"time": when, "timestamp_ms": ckpt.timestamp_ms, "inputs": dict(ckpt.inputs),
            "changelogs": dict(ckpt.changelogs)}


def _local_state(job: Job, row: PartitionInfo) -> str | None:
    """clean / dirty / absent for a store partition; None if the job's state dir is not here."""
    base = job.config.job.logged_store_base_dir
    if not (base / job.config.job.name).is_dir():
        return None
    if row.local_offset is not None:
        return "clean"
    live = local.store_dir(base, job.config.job.name, row.store, row.partition)
    return "dirty" if live.exists() else "absent"


def status(job: Job) -> tuple[GroupInfo, list[PartitionStatus]]:
    """The job's group and one :class:`PartitionStatus` per task partition.

    Raises :class:`JobNeverRanError` when the job has no checkpoint topic and no process.
    """
    partitions = job.partitions_of_inputs()
    group, owners = describe_group(job)
    checkpoints = job.checkpoints()
    # A job creates its checkpoint topic when it starts, before it joins the group.
    if not checkpoints and group.members == 0 and (
            job.admin.partition_count(job.checkpoint_topic) is None):
        raise JobNeverRanError(
            f"job {job.config.job.name} (id {job.config.job.id}) has never run against "
            f"{job.client_conf['bootstrap.servers']}: no checkpoint topic "
            f"{job.checkpoint_topic} and no process in consumer group {group.group}. "
            "Start it with `millpond run --config ...`")
    rows_by_partition: dict[int, list[PartitionInfo]] = {}
    for row in describe(job)[0]:
        rows_by_partition.setdefault(row.partition, []).append(row)
    inputs = [s.topic for s in job.config.job.inputs]
    consumer = job.consumer()
    out: list[PartitionStatus] = []
    try:
        for p in partitions:
            ckpt = checkpoints.get(task_name(p))
            committed: dict[str, int | None] = {}
            ends: dict[str, int] = {}
            lag = 0
            deleted: dict[str, int] = {}
            for topic in inputs:
                low, high = watermarks(consumer, topic, p)
                offset = ckpt.inputs.get(topic) if ckpt else None
                committed[topic], ends[topic] = offset, int(high)
                if offset is not None and offset < low:
                    deleted[topic] = int(low) - offset
                # With no checkpoint a task starts at the topic's start (opening.py).
                lag += max(0, int(high) - max(int(low), offset if offset is not None else 0))
            stores = [StoreStatus(r.store, r.topic, r.high, r.checkpointed, _local_state(job, r),
                                  r.local_offset, r.lag, r.backup)
                      for r in rows_by_partition.get(p, [])]
            out.append(PartitionStatus(p, task_name(p), owners.get(p), committed, ends, lag,
                                       _checkpoint_doc(ckpt), stores,
                                       dict(ckpt.skipped) if ckpt else {}, deleted))
    finally:
        consumer.close()
    return group, out


def to_json(group: GroupInfo, rows: list[PartitionStatus]) -> dict[str, Any]:
    """``millpond status --format json``'s object (also the job's page's Kafka view)."""
    return {"group": group.group, "group_state": group.state, "members": group.members,
            "partitions": [r.to_json() for r in rows]}


def format_table(group: GroupInfo, rows: list[PartitionStatus]) -> list[str]:
    """``millpond status``'s table: a header line about the group, one line per partition."""
    lines = [f"group {group.group}: {group.state}, {group.members} member(s)",
             f"{'part':>4}  {'owner':<44} {'committed':>10} {'end':>10} {'lag':>8}  "
             f"{'checkpoint (UTC)':<23}  stores (store: checkpointed/end, local[, backup])"]
    for r in rows:
        owner = f"{r.owner.client_id} {r.owner.host}" if r.owner else "-"
        committed = _offsets({t: o for t, o in r.committed.items()})
        end = _offsets(dict(r.end))
        when = (r.checkpoint or {}).get("time") or "-"
        stores = "; ".join(
            f"{s.store}: {_dash(s.checkpointed)}/{s.end}, {s.local or 'not here'}"
            + (f" (+{s.local_lag} to apply)" if s.local_lag else "")
            + (f", backup {s.backup.short()}" if s.backup is not None else "")
            for s in r.stores) or "-"
        lines.append(f"{r.partition:>4}  {owner:<44} {committed:>10} {end:>10} {r.lag:>8}  "
                     f"{when.replace('T', ' ').rstrip('Z'):<23}  {stores}{_gaps(r)}")
    return lines


def _gaps(r: PartitionStatus) -> str:
    """Input records lost to retention: skipped so far, and deleted while the checkpoint
    still needs them (skipped at the next open)."""
    out = []
    for topic, n in sorted(r.skipped.items()):
        out.append(f"{topic}: {n:,} input records skipped (deleted before processed)")
    for topic, n in sorted(r.deleted.items()):
        out.append(f"{topic}: {n:,} records after the checkpoint were deleted (retention?); "
                   "its auto.offset.reset policy applies when the task opens")
    return "".join(f"; {line}" for line in out)


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _offsets(offsets: dict[str, Any]) -> str:
    """One input: its offset; several: ``topic=offset`` pairs."""
    if len(offsets) == 1:
        return _dash(next(iter(offsets.values())))
    return ",".join(f"{t}={_dash(o)}" for t, o in sorted(offsets.items()))


def view_of(job: Job) -> Callable[[], dict[str, Any]]:
    """A function giving ``millpond status --format json``'s object for ``job`` (the query
    endpoint's page asks it; the container takes it from the CLI, as tasks sit below ops)."""

    def view() -> dict[str, Any]:
        return to_json(*status(job))

    return view

"""``millpond acls``: the Kafka ACLs a job needs, derived from its config alone.

Every resource a job touches is named by its config: its inputs and side inputs (read), its
changelogs and checkpoint topic (read, written in transactions, created and checked), its
dead-letter topic and outputs (written, created), its consumer groups (the job's group and
the readers' ``<group>-reader``, ``<group>-side-inputs``) and its tasks' transactional ids
(``<group>-partition-N``: one prefix). Three roles need different sets: the job itself
(``millpond run``), the read-only commands (``status``, ``checkpoint show``, ``changelog
describe``) and the operator's commands that write (``restore``, ``checkpoint set``,
``topics create``). Output topics are not in the config (a task names them in code): pass
them as ``--output``. A fourth role is the ``millpond spark`` commands': rebuild, audit and
snapshot read the changelogs and checkpoints (Spark's consumers under the job's
``<group>-spark`` group prefix); bootstrap and rescale also create and write them, read the
inputs' offsets, refuse while the job runs, and rescale grows the checkpoint topic and
commits the new checkpoints as transactional id ``<group>-rescale``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from millpond.changelog.generations import store_topic
from millpond.config import Config
from millpond.streams.compile import has_app, internal_topics, load_app

ROLES = ("job", "cli", "operator", "spark")

# Operations by what a topic is to the role (kafka-acls.sh names). Kafka's authorizer lets
# Read, Write, Delete and Alter imply Describe, so Describe is listed only where none of them
# is: every line printed is needed (one fewer is a denial).
READ_TOPIC = ("Read",)
OWN_TOPIC = ("Read", "Write", "Create", "DescribeConfigs")
WRITE_TOPIC = ("Write", "Create")
INSPECT_TOPIC = ("Read", "DescribeConfigs")


@dataclass(frozen=True, order=True)
class Acl:
    """One allow ACL: ``operation`` on ``resource`` (topic, group, transactional-id)
    ``name``, matched ``literal``-ly or as a ``prefixed`` name; ``why`` says what needs it."""

    resource: str
    name: str
    pattern: str
    operation: str
    why: str = ""

    def kafka_acls(self, principal: str) -> str:
        """The ``kafka-acls.sh`` arguments that add this ACL for ``principal``."""
        flag = {"topic": "--topic", "group": "--group",
                "transactional-id": "--transactional-id"}[self.resource]
        pattern = " --resource-pattern-type prefixed" if self.pattern == "prefixed" else ""
        return (f"--add --allow-principal {principal} --operation {self.operation} "
                f"{flag} {self.name}{pattern}")

    def to_json(self) -> dict[str, str]:
        return {"resource": self.resource, "name": self.name, "pattern": self.pattern,
                "operation": self.operation, "why": self.why}


def _topic(name: str, operations: Iterable[str], why: str,
           pattern: str = "literal") -> list[Acl]:
    return [Acl("topic", name, pattern, op, why) for op in operations]


def _group(name: str, operations: Iterable[str], why: str,
           pattern: str = "literal") -> list[Acl]:
    return [Acl("group", name, pattern, op, why) for op in operations]


def _changelogs(config: Config, operations: Sequence[str]) -> list[Acl]:
    """Each logged store's changelog, and its later generations (``<topic>-gen<K>``, written
    by ``spark rescale``) by prefix."""
    out: list[Acl] = []
    for cfg in config.stores.values():
        if cfg.changelog is None:
            continue
        topic = store_topic(config, cfg)
        out += _topic(topic, operations, f"changelog of store {cfg.name}")
        out += _topic(f"{topic}-gen", operations,
                      f"changelog generations of store {cfg.name} (after spark rescale)",
                      "prefixed")
    return out


def required_acls(config: Config, role: str, outputs: Sequence[str] = ()) -> list[Acl]:
    """The ACLs ``role`` (``job``, ``cli``, ``operator`` or ``spark``) needs for the job
    ``config``."""
    from millpond.job import Job

    job = Job(config)
    internal = internal_topics(config)  # a dataflow's key_by topics: inputs it also writes
    inputs = [ref.topic for ref in config.job.inputs if ref.topic not in internal]
    if has_app(config):  # an app names its own outputs
        outputs = [*outputs, *sorted(load_app(config).sinks - set(outputs))]
    side = sorted({ref.topic for cfg in config.stores.values() for ref in cfg.side_inputs})
    out: list[Acl] = []
    if role == "job":
        for topic in inputs:
            out += _topic(topic, READ_TOPIC, "input")
        for topic in side:
            out += _topic(topic, READ_TOPIC, "side input")
        for topic in internal:
            out += _topic(topic, (*OWN_TOPIC, "Delete"),
                          "a key_by's internal topic (created, written, read, purged)")
        out += _changelogs(config, OWN_TOPIC)
        out += _topic(job.checkpoint_topic, OWN_TOPIC, "checkpoint topic")
        if config.job.dlq_stream is not None:
            out += _topic(config.job.dlq_stream.topic, WRITE_TOPIC, "dead-letter topic")
        for topic in outputs:
            out += _topic(topic.removeprefix("kafka."), WRITE_TOPIC, "output")
        out += _group(job.group_id, ("Read",), "the job's consumer group")
        out += _group(job.reader_group_id, ("Read",),
                      "restore and checkpoint readers (assigned, never joined)")
        if side:
            out += _group(f"{job.group_id}-side-inputs", ("Read",),
                          "side-input readers (assigned, never joined)")
        out += [Acl("transactional-id", f"{job.group_id}-", "prefixed", "Write",
                    "one transactional id per task (fencing)")]
    elif role == "cli":
        for topic in inputs:
            out += _topic(topic, ("Describe",), "input (offsets, lag)")
        out += _changelogs(config, INSPECT_TOPIC)
        out += _topic(job.checkpoint_topic, ("Read",), "checkpoint topic")
        out += _group(job.group_id, ("Describe",), "status: who owns each task")
        out += _group(job.reader_group_id, ("Read",), "the commands' readers")
    elif role == "operator":
        for topic in inputs:
            out += _topic(topic, ("Create", "Describe"), "topics create")
        for topic in outputs:
            out += _topic(topic.removeprefix("kafka."), ("Create", "Describe"), "topics create")
        out += _changelogs(config, OWN_TOPIC)
        out += _topic(job.checkpoint_topic, OWN_TOPIC, "checkpoint set, restore --from-local")
        out += _group(job.group_id, ("Describe",), "refusing while the job runs")
        out += _group(job.reader_group_id, ("Read",), "the commands' readers")
    elif role == "spark":
        for topic in inputs:
            out += _topic(topic, READ_TOPIC, "rescale: input records after the checkpoints")
        out += _changelogs(config, OWN_TOPIC)
        out += _topic(job.checkpoint_topic, (*OWN_TOPIC, "Alter"),
                      "read by every spark command; bootstrap and rescale write it, "
                      "rescale adds partitions")
        out += _group(job.group_id, ("Describe",),
                      "bootstrap and rescale: refusing while the job runs")
        out += _group(job.reader_group_id, ("Read",), "bootstrap's and rescale's readers")
        out += _group(job.spark_group_id, ("Read",),
                      "Spark's consumers and the spark commands' readers (assigned, never "
                      "joined)", "prefixed")
        out += [Acl("transactional-id", job.rescale_transactional_id, "prefixed", "Write",
                    "rescale commits the new checkpoints in one transaction")]
    else:
        raise ValueError(f"role {role!r} is not one of {ROLES}")
    return list(dict.fromkeys(out))

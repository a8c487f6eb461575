"""Input deleted before it was processed, every policy of
``systems.kafka.consumer.auto.offset.reset`` (earliest/smallest, latest/largest,
error/none) x (job stopped, job running) x (gap inside the log, gap to the end), with a
control partition without gap: the scenario and what it checks are in
tests/tasks/test_input_reset.py (``make test`` runs its running/earliest case only; this
matrix takes about 90 s). And a dataflow's internal topic with a gap under exactly-once:
an error whatever the policy."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.tasks.test_input_reset import gap_scenario, job, procs  # noqa: F401

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize(("when", "policy"), [
    ("stopped", "earliest"), ("stopped", "latest"), ("stopped", "error"),
    ("running", "latest"), ("running", "error")])  # running/earliest: in make test
def test_gap_policy(kafka_bootstrap: str, job: Callable[..., tuple[Path, str, str]],  # noqa: F811
                    procs: list[subprocess.Popen[str]], policy: str, when: str) -> None:  # noqa: F811
    gap_scenario(kafka_bootstrap, job, procs, policy, when)


def test_internal_topic_gap_is_an_error_under_exactly_once(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """A dataflow's key_by topic holds state in flight, not old input: under exactly-once a
    gap there stops the job whatever auto.offset.reset says (the default, earliest, here)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from tests.kafka_util import (
        checkpoint_history,
        create_topic,
        produce_users,
        run_job,
        write_properties,
    )

    source, out, name = topic_name("in"), topic_name("out"), topic_name("app")
    for topic in (source, out):
        create_topic(kafka_bootstrap, topic, 2)
    produce_users(kafka_bootstrap, source, 200, 10, 2)
    (tmp_path / "gap_app.py").write_text(
        "from millpond.streams import App\n"
        "app = App()\n"
        f"app.source({source!r}).key_by('by-user', lambda v: v['user_id'])"
        f".count('counts').to({out!r})\n")
    config = write_properties(tmp_path / "app.properties", {
        "job.name": name, "app.class": "gap_app:app", "task.commit.ms": 300,
        "task.processing.guarantee": "exactly-once",
        "systems.kafka.bootstrap.servers": kafka_bootstrap,
        "systems.kafka.samza.key.serde": "string", "systems.kafka.samza.msg.serde": "json",
        "job.logged.store.base.dir": str(tmp_path / "state")})
    env = {"PYTHONPATH": str(tmp_path)}
    done = run_job(config, "--bounded", env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

    internal = f"{name}-1-by-user-repartition"
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(5):  # records the job has not read yet, then deleted
        producer.produce(internal, key=b"user-1", value=b'"x"', partition=0)
    assert producer.flush(30) == 0
    checkpointed = checkpoint_history(kafka_bootstrap, name)["partition-0"][-1][internal]
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "wm"})
    end = consumer.get_watermark_offsets(TopicPartition(internal, 0), timeout=30)[1]
    consumer.close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for f in admin.delete_records([TopicPartition(internal, 0, end)]).values():
        f.result(30)

    stopped = run_job(config, "--bounded", env=env, timeout=120)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr  # lost input: runtime
    assert (f"input {internal}[0] at start: the checkpointed offset {checkpointed} no longer "
            f"exists: the log starts at {end}") in stopped.stderr, stopped.stderr
    assert "an internal topic of the dataflow under exactly-once" in stopped.stderr
    assert len(stopped.stderr.strip().splitlines()[-1]) > 100  # the error is one line

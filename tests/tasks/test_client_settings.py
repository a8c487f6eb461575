"""Consumer settings a running job gives librdkafka, recorded as each real consumer is made
against the real broker: ``fetch.queue.backoff.ms`` defaults to 20 in every consumer a job
makes (its group consumer, the restore consumer, the side-input reader), and a
``systems.kafka.consumer.fetch.queue.backoff.ms`` of the job's reaches them instead
(docs/reference/configuration.md, ``systems.<system>.consumer.<prop>``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from millpond.config import Config
from millpond.kafka import clients
from millpond.tasks.container import Container
from tests.kafka_util import counting_job, create_topic, produce_users, write_properties

pytestmark = pytest.mark.kafka


def _run_recording(config: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Run the job bounded in this process; the settings of every consumer it made."""
    made: list[dict[str, Any]] = []
    real = clients.consumer

    def recording(conf: Mapping[str, Any]) -> Consumer:
        made.append(dict(conf))
        return real(conf)

    monkeypatch.setattr(clients, "consumer", recording)
    Container(Config.load(config), bounded=True, wait_timeout_s=60).run(install_signals=False)
    return made


@pytest.mark.parametrize("override", [None, "5"])
def test_every_consumer_of_a_job_gets_fetch_queue_backoff(
    override: str | None, kafka_bootstrap: str, topic_name: Callable[[str], str],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, side, name = topic_name("in"), topic_name("side"), topic_name("job")
    create_topic(kafka_bootstrap, source, 2)
    create_topic(kafka_bootstrap, side, 2)
    produce_users(kafka_bootstrap, source, 40, 4, 2)
    produce_users(kafka_bootstrap, side, 4, 4, 2)
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state", **{
        # a side-input store, so the side-input reader's consumer is made too
        "stores.profiles.factory": "rocksdb",
        "stores.profiles.key.serde": "string",
        "stores.profiles.msg.serde": "json",
        "stores.profiles.side.inputs": f"kafka.{side}",
        "stores.profiles.side.inputs.processor.factory":
            "millpond.sideinputs.KeyValueProcessor"})
    if override is not None:
        props["systems.kafka.consumer.fetch.queue.backoff.ms"] = override
    made = _run_recording(write_properties(tmp_path / "job.properties", props), monkeypatch)

    expected = override or 20
    group = [c for c in made if c.get("group.id") == f"{name}-1"]
    side_readers = [c for c in made if c.get("group.id") == f"{name}-1-side-inputs"]
    restores = [c for c in made if c.get("group.id") == f"{name}-1-reader"]
    assert len(group) == 1 and side_readers and restores, made
    for conf in made:
        assert str(conf.get("fetch.queue.backoff.ms")) == str(expected), conf

"""The delivery-error counter against a real broker (not a fake source): an output record
larger than its topic's ``max.message.bytes`` is accepted by the client (under its own
``message.max.bytes``) and refused by the broker at delivery. The job stops before anything
is committed (docs/concepts/commits.md) and its /metrics counts the refused record in
``millpond_producer_delivery_errors_total`` for the task that sent it
(docs/operations/metrics.md).

The job runs in this process with its Prometheus reporter kept serving after the job stopped
(its ``stop`` deferred to the test), so the counter is scraped over HTTP as Prometheus would,
after the error and not in a race with the process exiting.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from millpond.config import Config
from millpond.kafka.errors import DeliveryError
from millpond.metrics.prometheus import PrometheusReporter
from millpond.tasks.container import Container
from tests.kafka_util import (
    checkpoint_history,
    counting_job,
    create_topic,
    read_topic,
    write_properties,
)
from tests.metrics.scrape import scrape

pytestmark = pytest.mark.kafka

TOPIC_MAX = 4096  # the output topic's max.message.bytes; the client's is 1 MB


def test_a_record_the_broker_refuses_is_counted_and_stops_the_commit(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, sink, name = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, sink, 1, **{"max.message.bytes": str(TOPIC_MAX)})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    # random text: the producer compresses, so a repeated pad would shrink below the limit
    pad = base64.b64encode(os.urandom(4 * TOPIC_MAX)).decode()
    producer.produce(source, key=b"big", value=json.dumps({"pad": pad}), partition=0)
    assert producer.flush(30) == 0
    props = counting_job(kafka_bootstrap, name, source, tmp_path / "state", **{
        "task.class": "tests.jobs.envelope_echo.EnvelopeEcho", "echo.stream": f"kafka.{sink}",
        "metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": 0})
    config = write_properties(tmp_path / "job.properties", props)

    reporters: list[PrometheusReporter] = []
    real_stop = PrometheusReporter.stop
    monkeypatch.setattr(PrometheusReporter, "stop", lambda self: reporters.append(self))
    container = Container(Config.load(config), bounded=True, wait_timeout_s=60)
    try:
        with pytest.raises(DeliveryError) as info:
            container.run(install_signals=False)
        assert [r.url for r in reporters] == [r.url for r in container.reporters], reporters
        [reporter] = reporters
        metrics = scrape(reporter.url)
    finally:
        for reporter in reporters:
            real_stop(reporter)

    message = str(info.value)
    assert message.startswith("Kafka did not accept a record: ") and f"{sink}[0]" in message
    assert "too large" in message.lower(), message
    errors = metrics["millpond_producer_delivery_errors_total"]
    assert {dict(labels)["task"]: value for labels, value in errors.items()} == {
        "partition-0": 1.0}, errors
    # nothing was committed: no output readable, no checkpoint past the refused record
    assert read_topic(kafka_bootstrap, sink) == []
    history = checkpoint_history(kafka_bootstrap, name)
    assert all(c.get(source, 0) == 0 for cs in history.values() for c in cs), history

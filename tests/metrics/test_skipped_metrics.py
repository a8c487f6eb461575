"""The skipped-messages counter against a real broker (not a fake source): a job told to
drop or dead-letter undecodable input counts each record it skipped, on its own /metrics,
and the rest of its input exactly once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kafka_util import counting_job, dump_store, start_job, stop_job, write_properties
from tests.metrics.scrape import scrape_until, total
from tests.metrics.test_prometheus_scrape import URL_LINE, Lines
from tests.tasks.test_runtime import _poison_input

pytestmark = pytest.mark.kafka


@pytest.mark.parametrize("policy", ["drop", "dead-letter"])
def test_skipped_records_are_counted_on_the_jobs_metrics(
    policy: str, kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source = topic_name("in")
    expected, _ = _poison_input(kafka_bootstrap, source)  # 500 good, 1 bad in partition 0
    extra = ({"task.drop.deserialization.errors": "true"} if policy == "drop"
             else {"task.dlq.stream": f"kafka.{topic_name('dlq')}"})
    conf = write_properties(tmp_path / "job.properties", {
        **counting_job(kafka_bootstrap, topic_name("job"), source, tmp_path / "s", **extra),
        "metrics.reporters": "prometheus", "metrics.reporter.prometheus.port": 0})
    job = start_job(conf)
    try:
        out = Lines(job)
        url = out.wait_for(URL_LINE, timeout=60).group(1)
        metrics = scrape_until(url, lambda m: total(m, "millpond_messages_processed_total")
                               >= sum(expected.values()), job, out.text)
        assert total(metrics, "millpond_messages_skipped_total") == 1
        [labels] = metrics["millpond_messages_skipped_total"]
        assert dict(labels)["task"] == "partition-0"
        assert total(metrics, "millpond_producer_delivery_errors_total") == 0
    finally:
        stop_job(job)
    assert job.returncode == 0, out.text()[-3000:]
    assert dump_store(conf, "counts") == dict(expected)


"""Reading a running job's Prometheus endpoint in tests: one scrape, a family's total, and
scraping until the metrics show what a test waits for (bounded, failing with the log)."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Metrics = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(url: str) -> Metrics:
    """sample name -> {sorted labels: value} of one GET of ``url``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: Metrics = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def total(metrics: Metrics, name: str) -> float:
    """The sum of a sample's values over all its label sets (0 if it is absent)."""
    return sum(metrics.get(name, {}).values())


def scrape_until(url: str, done: Callable[[Metrics], bool], job: subprocess.Popen[str],
                 log: Callable[[], Any], timeout: float = 60.0) -> Metrics:
    """Scrape ``url`` until ``done(metrics)``; fails with the last scrape and the tail of
    ``log()`` if ``timeout`` s pass or the job exits first."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = scrape(url)
        if done(metrics):
            return metrics
        assert time.monotonic() < deadline and job.poll() is None, (
            f"the metrics did not come within {timeout:g} s (job exit code {job.poll()})",
            metrics, str(log())[-3000:])
        time.sleep(0.3)

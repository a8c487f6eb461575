"""Metrics reporters (Samza's ``metrics.reporters``), behind a narrow interface.

The runtime implements :class:`MetricsSource` (plain counters it keeps anyway, sampled at
scrape time) and calls :func:`start_reporters`; it never sees a reporter's wire format.
With no reporter configured nothing is started and nothing is imported.
"""

from __future__ import annotations

from typing import Protocol

from millpond.metrics.config import PrometheusConfig, parse_reporters
from millpond.metrics.errors import MetricsConfigError, MetricsError
from millpond.metrics.histogram import DurationHistogram
from millpond.metrics.samples import BackupSample, MetricsSource, StoreSample, TaskSample

__all__ = [
    "BackupSample",
    "DurationHistogram",
    "MetricsConfigError",
    "MetricsError",
    "MetricsSource",
    "Reporter",
    "StoreSample",
    "TaskSample",
    "parse_reporters",
    "start_reporters",
]


class Reporter(Protocol):
    """A running reporter."""

    url: str

    def stop(self) -> None:
        """Stop reporting and release what it holds (e.g. a port)."""
        ...


def start_reporters(configs: list[PrometheusConfig], source: MetricsSource) -> list[Reporter]:
    """Start every configured reporter over ``source``; stops the started ones on failure."""
    started: list[Reporter] = []
    try:
        for config in configs:
            from millpond.metrics.prometheus import PrometheusReporter

            started.append(PrometheusReporter(config, source))
    except BaseException:
        for reporter in started:
            reporter.stop()
        raise
    return started


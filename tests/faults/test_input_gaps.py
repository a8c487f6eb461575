"""Input deleted before it was processed, every policy of
``systems.kafka.consumer.auto.offset.reset`` (earliest/smallest, latest/largest,
error/none) x (job stopped, job running) x (gap inside the log, gap to the end), with a
control partition without gap: the scenario and what it checks are in
tests/tasks/test_input_reset.py (``make test`` runs its running/earliest case only; this
matrix takes about two minutes)."""

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

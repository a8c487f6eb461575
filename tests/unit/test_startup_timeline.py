"""The start-up line: each phase's seconds from where the one before ended, logged once."""

from __future__ import annotations

import logging
import time

import pytest

from millpond.tasks.startup import StartupTimeline, process_started_at


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_phases_run_from_mark_to_mark_and_the_line_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(100.25)
    timeline = StartupTimeline(started=100.0, clock=clock, since="the process started")
    timeline.mark("interpreter, imports and config")
    clock.now = 100.30
    timeline.mark("Kafka reachable")
    clock.now = 100.32
    timeline.mark_once("Kafka reachable")  # the container's own wait, after the CLI's
    timeline.mark("the job's topics")
    clock.now = 100.5
    with caplog.at_level(logging.INFO, logger="millpond.container"):
        timeline.ready(4)
        clock.now = 101.0
        timeline.ready(4)  # a later assignment: not a start-up
        timeline.mark("late")
    assert [(p, round(s, 3)) for p, s in timeline.phases()] == [
        ("interpreter, imports and config", 0.25), ("Kafka reachable", 0.05),
        ("the job's topics", 0.02), ("tasks opened", 0.18)]
    lines = [r.getMessage() for r in caplog.records if "start-up" in r.getMessage()]
    assert lines == ["start-up: all 4 task(s) ready 0.500 s after the process started: "
                     "interpreter, imports and config 0.250 s; Kafka reachable 0.050 s; the "
                     "job's topics 0.020 s; tasks opened 0.180 s"]


def test_the_process_start_is_read_from_proc() -> None:
    started = process_started_at()
    assert started is not None  # Linux
    # This test process started before the test and after the machine booted; pytest's own
    # start-up and the tests before take seconds to minutes, never days.
    assert time.time() - 86400 < started <= time.time() + 0.02
    assert StartupTimeline.of_process().since == "the process started"
    made = StartupTimeline()  # a container made in a longer-lived process: from its making
    assert made.since == "the container was made" and time.time() - made.started < 1

"""An opening's reads that wait on Kafka run on the opening thread while the run loop goes
on: the generator yields until the read returns, and a dropped opening waits for its read
(the next opening uses the same consumer)."""

from __future__ import annotations

import threading
import time

import pytest

from millpond.tasks.opening import waiting


def test_the_read_runs_elsewhere_while_the_opening_yields() -> None:
    release = threading.Event()
    ran_on: list[str] = []

    def read() -> int:
        ran_on.append(threading.current_thread().name)
        assert release.wait(10)
        return 42

    steps = waiting(read)
    yields = 0
    for _ in range(5):  # the read is blocked: every step yields at once, processing goes on
        began = time.monotonic()
        assert next(steps) is None
        assert time.monotonic() - began < 0.5
        yields += 1
    release.set()
    with pytest.raises(StopIteration) as done:
        while True:
            next(steps)
    assert done.value.value == 42 and yields == 5
    assert ran_on and ran_on[0].startswith("millpond-open")


def test_a_read_failure_reaches_the_opening() -> None:
    def read() -> int:
        raise ValueError("no checkpoint topic")

    with pytest.raises(ValueError, match="no checkpoint topic"):
        for _ in waiting(read):
            pass


def test_a_dropped_opening_waits_for_its_read_to_end() -> None:
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def read() -> None:
        started.set()
        release.wait(10)
        ended.set()

    steps = waiting(read)
    next(steps)
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()
    steps.close()  # the partition moved while the read was under way
    assert ended.is_set()  # close returned only after the read did

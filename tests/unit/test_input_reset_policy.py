"""The input reset policy's arithmetic and config (the broker tests: tests/tasks/
test_input_reset.py and tests/faults/test_input_gaps.py)."""

from __future__ import annotations

import pytest

from millpond.config import ConfigError
from millpond.config.loader import Config
from millpond.config.properties import parse_properties
from millpond.tasks.input_reset import InputGapError, ResetPolicy

BASE = ("job.name=j\ntask.class=tests.jobs.counting.Counter\ntask.inputs=kafka.in\n"
        "systems.kafka.bootstrap.servers=127.0.0.1:9\n")


def policy(extra: str = "") -> ResetPolicy:
    return ResetPolicy.of(Config.from_properties(parse_properties(BASE + extra)))


@pytest.mark.parametrize(("value", "meant"), [
    ("", "earliest"), ("smallest", "earliest"), ("earliest", "earliest"),
    ("largest", "latest"), ("latest", "latest"), ("none", "error"), ("error", "error")])
def test_spellings(value: str, meant: str) -> None:
    extra = f"systems.kafka.consumer.auto.offset.reset={value}\n" if value else ""
    assert policy(extra).policy == meant


def test_unknown_value_names_the_key() -> None:
    with pytest.raises(ConfigError, match="auto.offset.reset.*unknown value 'oldest'"):
        policy("systems.kafka.consumer.auto.offset.reset=oldest\n")


def test_counts() -> None:
    earliest, latest = ResetPolicy("earliest"), ResetPolicy("latest")
    assert earliest.resolve("t", 0, 25, 20, 40, "at start") is None  # in range
    r = earliest.resolve("t", 1, 20, 30, 40, "at start")
    assert r is not None and (r.new, r.deleted, r.jumped, r.counts()) == (30, 10, 0,
                                                                           {"deleted": 10})
    r = latest.resolve("t", 1, 20, 30, 40, "while running")
    assert r is not None and (r.new, r.skipped, r.counts()) == (
        40, 20, {"deleted": 10, "reset_latest": 10})
    r = earliest.resolve("t", 2, 50, 0, 10, "while running")  # beyond a recreated topic's end
    assert r is not None and (r.new, r.skipped) == (0, 0)
    with pytest.raises(InputGapError, match=r"input t\[1\] at start: the checkpointed offset 20 "
                       r"no longer exists: the log starts at 30"):
        ResetPolicy("error").resolve("t", 1, 20, 30, 40, "at start")


def test_internal_topics_are_strict_under_exactly_once() -> None:
    config = Config.from_properties(parse_properties(
        BASE + "task.processing.guarantee=exactly-once\n"))
    strict = ResetPolicy.of(config, ["app-by-user"])
    assert strict.of_topic("app-by-user") == "error" and strict.of_topic("in") == "earliest"
    assert ResetPolicy.of(Config.from_properties(parse_properties(BASE)),
                          ["app-by-user"]).of_topic("app-by-user") == "earliest"

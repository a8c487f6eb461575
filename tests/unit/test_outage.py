"""Kafka outages: quiet logging (one line per cause per 30 s), and the task.timeout.ms clock."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from millpond.kafka.clients import LibrdkafkaLog
from millpond.kafka.errors import BrokerUnreachableError
from millpond.kafka.outage import LogLimiter, OutageClock, is_unavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_cause_is_let_through_once_per_window_with_a_count_of_the_rest() -> None:
    clock = Clock()
    limiter = LogLimiter(every_s=30.0, clock=clock)
    assert limiter.admit("a") == 0
    assert [limiter.admit("a") for _ in range(5)] == [None] * 5
    assert limiter.admit("b") == 0  # another cause is not held back
    clock.now += 29.9
    assert limiter.admit("a") is None
    clock.now += 0.2
    assert limiter.admit("a") == 6


def test_every_clients_connection_failures_are_one_line_per_30s(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three clients repeating librdkafka's FAIL line every second for a minute (ports,
    counts and client numbers differ) log 2 lines, the second saying how many it stands
    for; a debug line is never dropped."""
    clock = Clock()
    rdlog = LibrdkafkaLog(limiter=LogLimiter(clock=clock))
    caplog.set_level(logging.DEBUG, logger="millpond.kafka")
    for second in range(60):
        clock.now += 1
        for client in ("rdkafka#consumer-1", "rdkafka#producer-2", "rdkafka#producer-3"):
            rdlog.log(logging.ERROR, "%s [%s] %s", "FAIL", client,
                      f"127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: Connection "
                      f"refused (after {second}ms in state CONNECT, {second % 3} identical "
                      "error(s) suppressed)")
    rdlog.log(logging.DEBUG, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "debug detail")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[1].endswith("(+89 similar in the last 30s)"), lines[1]
    assert lines[2].endswith("debug detail")


def test_the_outage_clock_stops_the_job_only_past_the_timeout() -> None:
    clock = Clock()
    outage = OutageClock(300.0, "127.0.0.1:9092", clock=clock)
    outage.check()
    outage.unavailable("commit timed out")
    clock.now += 299
    outage.check()
    outage.available()  # Kafka answered: a later outage starts from zero
    clock.now += 100
    outage.unavailable("init_transactions timed out")
    clock.now += 299
    outage.check()
    clock.now += 2
    with pytest.raises(BrokerUnreachableError, match=r"unreachable for 301s, longer than "
                       r"task.timeout.ms=300000 \(init_transactions timed out\)"):
        outage.check()
    assert outage.outages == 2


def test_task_timeout_0_stops_at_the_first_outage() -> None:
    outage = OutageClock(0.0, "127.0.0.1:9092", clock=Clock())
    outage.unavailable("x")
    with pytest.raises(BrokerUnreachableError):
        outage.check()


def test_which_errors_mean_unreachable() -> None:
    assert is_unavailable(KafkaError(KafkaError._MSG_TIMED_OUT))
    assert is_unavailable(KafkaError(KafkaError._TRANSPORT))
    assert is_unavailable(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert not is_unavailable(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    assert not is_unavailable(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))


def test_an_outage_counts_from_when_the_failed_work_began() -> None:
    """A commit's records wait in the producer until they time out: the outage it reports
    began when the work began (the task's last commit), not when the timeout fired."""
    clock = Clock()
    outage = OutageClock(300.0, "127.0.0.1:9092", clock=clock)
    outage.unavailable("records timed out", ago_s=50.0)
    assert outage.down_s == 50.0
    outage.unavailable("again", ago_s=500.0)  # the outage had already begun
    assert outage.down_s == 50.0


def test_a_limiter_pickles_without_its_history() -> None:
    """Spark pickles the job's client settings (their logger and its limiter included)."""
    import pickle

    limiter = LogLimiter()
    limiter.admit("a")
    copy = pickle.loads(pickle.dumps(limiter))
    assert copy.admit("a") == 0 and limiter.admit("a") is None

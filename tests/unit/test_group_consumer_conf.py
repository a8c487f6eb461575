"""The job's group consumer settings: millpond's defaults, the job's keys over them, and the
keys the run loop depends on over those."""

from __future__ import annotations

from millpond.tasks.container import HEARTBEAT_MS, group_consumer_conf


def test_heartbeats_are_quick_unless_the_job_sets_them() -> None:
    """A cooperative rebalance's second round waits for each member's next heartbeat."""
    conf = group_consumer_conf({}, "g", "c", "read_uncommitted", False)
    assert conf["heartbeat.interval.ms"] == HEARTBEAT_MS == 500
    mine = group_consumer_conf({"heartbeat.interval.ms": 2000}, "g", "c", "read_uncommitted",
                               False)
    assert mine["heartbeat.interval.ms"] == 2000


def test_the_run_loops_keys_win_over_the_jobs() -> None:
    conf = group_consumer_conf(
        {"group.id": "other", "enable.auto.commit": True, "auto.offset.reset": "earliest",
         "partition.assignment.strategy": "range", "fetch.queue.backoff.ms": 100,
         "client.id": "mine"}, "g", "c", "read_committed", True)
    assert conf["group.id"] == "g" and conf["enable.auto.commit"] is False
    assert conf["auto.offset.reset"] == "error"
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"
    assert conf["isolation.level"] == "read_committed" and conf["enable.partition.eof"] is True
    assert conf["fetch.queue.backoff.ms"] == 100 and conf["client.id"] == "mine"

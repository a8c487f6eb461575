"""A task's producer reports delivery errors only and reads its changelogs' last offsets from
the partitions' ends (millpond.kafka.ends), against the real broker: the offsets it gives are
those of the last records it wrote (read back with a consumer), across committed and aborted
transactions; a delivery error still stops the commit naming the record; a stale end is
never taken."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient

from millpond.kafka import producer as producer_module
from millpond.kafka.ends import LogEnds
from millpond.kafka.errors import DeliveryError, TransactionAbortedError
from millpond.kafka.producer import TrackedProducer, resolve_together
from tests.kafka_util import create_topic, read_topic

pytestmark = pytest.mark.kafka


def task_producer(bootstrap: str, txn_id: str, ends: LogEnds) -> TrackedProducer:
    p = TrackedProducer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "message.timeout.ms": 30_000}, ends=ends)
    p.init_transactions(30)
    return p


def last_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Per partition, the offset of the last committed record (read back)."""
    out: dict[int, int] = {}
    for msg in read_topic(bootstrap, topic):
        out[msg.partition()] = max(out.get(msg.partition(), -1), msg.offset())
    return out


def test_last_offsets_are_the_last_records_written(
        kafka_bootstrap: str, topic_name: Callable[[str], str]) -> None:
    log, out = topic_name("log"), topic_name("out")
    create_topic(kafka_bootstrap, log, 2)
    create_topic(kafka_bootstrap, out, 2)
    ends = LogEnds(AdminClient({"bootstrap.servers": kafka_bootstrap}))
    p = task_producer(kafka_bootstrap, topic_name("txn"), ends)
    p.watch_offsets(log)
    for round_, (n, commit) in enumerate([(5, True), (3, False), (7, True), (1, True)]):
        p.begin_transaction()
        for i in range(n):
            p.send(log, 0, f"k{i}".encode(), f"{round_}".encode())
            p.send(out, None, f"k{i}".encode(), b"x")  # not watched: no offset kept
        p.send(log, 1, b"one", f"{round_}".encode())
        p.flush_and_check()
        if not commit:
            p.abort_transaction()
            continue
        got = {part: p.last_offset(log, part) for part in (0, 1)}
        p.commit_transaction()
        assert got == last_offsets(kafka_bootstrap, log), round_
    assert p.acked == 0  # no delivery report came for a record delivered
    assert p.last_offset(out, 0) is None and p.last_offset(out, 1) is None
    # 3 commits with records in both partitions: one ListOffsets each (the aborted one none)
    assert ends.requests == 3
    p.close()


def test_tasks_producers_read_their_ends_together(
        kafka_bootstrap: str, topic_name: Callable[[str], str]) -> None:
    log = topic_name("log")
    create_topic(kafka_bootstrap, log, 3)
    ends = LogEnds(AdminClient({"bootstrap.servers": kafka_bootstrap}))
    producers = [task_producer(kafka_bootstrap, topic_name(f"txn{i}"), ends) for i in range(3)]
    for i, p in enumerate(producers):
        p.watch_offsets(log)
        p.begin_transaction()
        for j in range(10 + i):
            p.send(log, i, f"k{j}".encode(), b"v")
        p.flush_and_check()
    resolve_together(producers)
    assert ends.requests == 1
    got = {i: p.last_offset(log, i) for i, p in enumerate(producers)}
    assert ends.requests == 1  # resolved already
    for p in producers:
        p.commit_transaction()
        p.close()
    assert got == last_offsets(kafka_bootstrap, log)


def test_a_delivery_error_still_stops_the_commit_naming_the_record(
        kafka_bootstrap: str, topic_name: Callable[[str], str]) -> None:
    small = topic_name("small")
    create_topic(kafka_bootstrap, small, 1, **{"max.message.bytes": "2000"})
    ends = LogEnds(AdminClient({"bootstrap.servers": kafka_bootstrap}))
    p = task_producer(kafka_bootstrap, topic_name("txn"), ends)
    p.begin_transaction()
    p.send(small, 0, b"fits", b"v")
    p.send(small, 0, b"too-big", os.urandom(50_000))  # incompressible
    with pytest.raises(DeliveryError) as info:
        p.flush_and_check()
    # the batch of both was refused: each record's report came, naming the partition and key
    assert f"{small}[0] key=b'fits'" in str(info.value), info.value
    assert "Message size too large (+1 more)" in str(info.value)
    assert p.delivery_errors == 2
    p.abort_transaction()
    p.discard()


def test_an_end_behind_the_records_sent_is_never_taken(
        monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str,
        topic_name: Callable[[str], str]) -> None:
    """A leader's end that has not reached the records sent (a stale high watermark) is read
    again, and at the deadline the transaction is replayed: a checkpoint at a lower offset
    would make recovery trim the transaction's last records."""
    log = topic_name("log")
    create_topic(kafka_bootstrap, log, 1)
    real = LogEnds(AdminClient({"bootstrap.servers": kafka_bootstrap}))
    answers: list[int] = []

    def stale(parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        ends = real(parts)
        answers.append(ends[(log, 0)])
        # the first two asks answer one record short, then the truth
        return {tp: end - 1 if len(answers) <= 2 else end for tp, end in ends.items()}

    p = task_producer(kafka_bootstrap, topic_name("txn"), real)
    p._ends = stale
    p.watch_offsets(log)
    p.begin_transaction()
    for i in range(4):
        p.send(log, 0, f"k{i}".encode(), b"v")
    p.flush_and_check()
    assert p.last_offset(log, 0) == answers[-1] - 1 and len(answers) == 3
    p.commit_transaction()
    assert p.last_offset(log, 0) == last_offsets(kafka_bootstrap, log)[0]

    p._ends = lambda parts: {tp: 0 for tp in parts}  # never reaches the records
    monkeypatch.setattr(producer_module, "ENDS_WAIT_S", 0.2)
    p.begin_transaction()
    p.send(log, 0, b"k", b"v")
    p.flush_and_check()
    with pytest.raises(TransactionAbortedError, match=r"ends at offset -1, before its last"):
        p.last_offset(log, 0)
    p.abort_transaction()
    p.close()

"""Processes of a counting job with a query endpoint, for the routing and page tests: start
one, produce page views where the job's partitioner puts them, GET an endpoint."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from millpond.partitioner import partition_of
from tests.kafka_util import OutputLines, start_job

ENDPOINT = re.compile(r"query endpoint on (http://[\d.]+:\d+)/stores")
PARTITIONS = 4


def fetch(url: str, token: str | None = None) -> tuple[int, Any, str]:
    """(status, JSON body, Millpond-Served-By) of a GET (with the endpoint's ``token``, if
    given)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=30) as resp:
            return resp.status, json.loads(resp.read()), resp.headers["Millpond-Served-By"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), exc.headers["Millpond-Served-By"]


def produce(bootstrap: str, topic: str, n: int, users: int) -> Counter[str]:
    """Page views keyed by user, each at the partition the job's partitioner (murmur2) gives."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    expected: Counter[str] = Counter()
    for i in range(n):
        user = f"user-{(i * 7919) % users}"
        while True:
            try:
                producer.produce(topic, key=user.encode(), value=json.dumps({"user_id": user}),
                                 partition=partition_of(user.encode(), PARTITIONS))
                break
            except BufferError:  # a queue full of the batches before: let them go
                producer.poll(0.1)
        expected[user] += 1
    assert producer.flush(60) == 0
    return expected


def start(config: Path, process: int | None, env: dict[str, str] | None = None,
          ) -> tuple[subprocess.Popen[str], OutputLines, str]:
    """Start a process of the job (a static group member ``routing-<process>``, or a
    dynamic one for None): its output and endpoint."""
    static = ("--config-override", f"systems.kafka.consumer.group.instance.id=routing-{process}")
    proc = start_job(config, *(static if process is not None else ()), env=env)
    out = OutputLines(proc)
    lines = out.wait_for("the query endpoint", lambda ls: any(ENDPOINT.search(x) for x in ls))
    found = next(m for x in lines if (m := ENDPOINT.search(x)))
    return proc, out, found.group(1)


def scan_pages(url: str, answered: bool = True) -> tuple[list[tuple[str, int]], int]:
    """Every entry of a scan through its continuation tokens, and the pages it took
    (``answered=False``: nothing, 0 if a page is not answered 200)."""
    out: list[tuple[str, int]] = []
    pages = 0
    after = None
    while True:
        status, body, _ = fetch(url + (f"&next={after}" if after else ""))
        if status != 200 and not answered:
            return [], 0
        assert status == 200, body
        pages += 1
        out += [(e["key"], e["value"]) for e in body["entries"]]
        after = body["next"]
        if after is None:
            return out, pages


def scan(url: str) -> list[tuple[str, int]]:
    """Every entry of a scan through its continuation tokens."""
    return scan_pages(url)[0]

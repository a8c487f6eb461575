"""The query load of the count's query-overhead run (issue #33): paced gets of a job's store.

    python -m benchmarks.query_driver --url http://127.0.0.1:PORT --users N --partitions P \
        --out FILE [--rate 1000] [--routed-share 0.9] [--connections 128]

Runs in its own process (its CPU is not the job's) until SIGTERM or SIGINT, then writes
FILE: each request's send time, latency and HTTP status (0: no connection yet), the requests
skipped because every connection was busy, and the driver's own CPU seconds.

Requests are paced on one schedule (request i at start + i / rate), taken in turn by
``connections`` threads, each with its own keep-alive connection, so a slow answer does not
hold the schedule back unless every connection is waiting; a thread more than a second behind
the schedule skips ahead (counted). Keys are random users of the input (``user-%06d``).
``routed_share`` of the requests ask ``/stores/<store>/get?key=K`` (the endpoint finds the
key's partition with the job's partitioner, murmur2): the benchmark input puts user u on
partition u % partitions, so these keys are drawn from the users murmur2 places on that same
partition (every answer is a stored count); the rest ask ``/stores/<store>/<u % P>/get``
for any user.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import resource
import signal
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from millpond.partitioner import partition_of

MAX_LAG_S = 1.0  # a thread further behind the schedule skips to now


def user_key(u: int) -> str:
    """The benchmark input's key of user number ``u`` (benchmarks/data.py)."""
    return f"user-{u:06d}"


def paths(store: str, users: int, partitions: int, routed_share: float, n: int,
          seed: int = 33) -> list[str]:
    """``n`` request paths (a fixed random draw): routed gets of users murmur2 places on their
    own partition, and per-partition gets of any user."""
    rng = random.Random(seed)
    routable = [u for u in range(users)
                if partition_of(user_key(u).encode(), partitions, "murmur2") == u % partitions]
    s = quote(store, safe="")
    out = []
    for _ in range(n):
        if routable and rng.random() < routed_share:
            out.append(f"/stores/{s}/get?key={user_key(rng.choice(routable))}")
        else:
            u = rng.randrange(users)
            out.append(f"/stores/{s}/{u % partitions}/get?key={user_key(u)}")
    return out


class Driver:
    """Paced gets over ``connections`` keep-alive connections until stopped."""

    def __init__(self, url: str, paths: list[str], rate: float, connections: int) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.paths, self.rate, self.connections = paths, rate, connections
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self.skipped = 0
        self.sent: list[float] = []
        self.latency_ms: list[float] = []
        self.status: list[int] = []
        self.start = 0.0

    def _slot(self) -> int:
        """The next request number of the schedule, skipping ahead if it is far behind."""
        with self._lock:
            i = self._next
            behind = int((time.time() - self.start - MAX_LAG_S) * self.rate)
            if behind > i:
                self.skipped += behind - i
                i = behind
            self._next = i + 1
            return i

    def _worker(self) -> None:
        conn: http.client.HTTPConnection | None = None
        while not self.stop.is_set():
            i = self._slot()
            if self.stop.wait(max(0.0, self.start + i / self.rate - time.time())):
                break  # the pacing wait
            path = self.paths[i % len(self.paths)]
            began = time.time()
            status = 0
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
            with self._lock:
                self.sent.append(began)
                self.latency_ms.append(round((time.time() - began) * 1000, 3))
                self.status.append(status)
        if conn is not None:
            conn.close()

    def run(self) -> None:
        """Drive until ``stop`` is set (bounded: each request times out after 10 s)."""
        self.start = time.time()
        threads = [threading.Thread(target=self._worker, daemon=True)
                   for _ in range(self.connections)]
        for t in threads:
            t.start()
        self.stop.wait()
        for t in threads:
            t.join(15)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.query_driver",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the job's query endpoint, http://host:port")
    p.add_argument("--store", default="counts")
    p.add_argument("--users", type=int, required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--rate", type=float, default=1000.0, help="requests per second")
    p.add_argument("--routed-share", type=float, default=0.9,
                   help="share of the gets without a partition (routed)")
    p.add_argument("--connections", type=int, default=128,
                   help="keep-alive connections (default 128: answers wait for the run loop's "
                        "next iteration; 1,000/s at ~100 ms each needs ~100 in flight)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    driver = Driver(a.url, paths(a.store, a.users, a.partitions, a.routed_share, 100_000),
                    a.rate, a.connections)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: driver.stop.set())
    driver.run()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {
        "url": a.url, "rate": a.rate, "connections": a.connections,
        "routed_share": a.routed_share, "started": driver.start, "stopped": time.time(),
        "skipped": driver.skipped, "cpu_s": usage.ru_utime + usage.ru_stime,
        "sent": driver.sent, "latency_ms": driver.latency_ms, "status": driver.status}
    a.out.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The query load of the count's query-overhead run (issue #33): paced gets of a job's store.

    python -m benchmarks.query_driver --url http://127.0.0.1:PORT --users N --partitions P \
        --out FILE [--rate 1000] [--routed-share 0.9] [--connections 128]

Runs in its own process (its CPU is not the job's) until SIGTERM or SIGINT, then writes
FILE: each request's send time, latency and HTTP status (0: no connection yet), the requests
skipped because every connection was busy, and the driver's own CPU seconds.

Requests are paced on one schedule (request i at start + i / rate), each sent on an idle one
of ``connections`` keep-alive connections (one thread, a selector), so a slow answer does
not hold the schedule back unless every connection is waiting; more than a second behind the
schedule, the driver skips ahead (counted). Keys are random users of the input (``user-%06d``).
``routed_share`` of the requests ask ``/stores/<store>/get?key=K`` (the endpoint finds the
key's partition with the job's partitioner, murmur2): the benchmark input puts user u on
partition u % partitions, so these keys are drawn from the users murmur2 places on that same
partition (every answer is a stored count); the rest ask ``/stores/<store>/<u % P>/get``
for any user.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import selectors
import signal
import socket
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


class _Conn:
    """One keep-alive connection of the driver: at most one request in flight."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.began = 0.0  # when its request in flight was sent (0: none)


class Driver:
    """Paced gets over ``connections`` keep-alive connections until stopped, from one thread
    (a selector over raw sockets: the driver's own CPU per get is a few tens of microseconds,
    which on a 2-core machine it takes from the job and the broker)."""

    def __init__(self, url: str, paths: list[str], rate: float, connections: int) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.requests = [f"GET {p} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
                         for p in paths]
        self.rate, self.connections = rate, connections
        self.stop = threading.Event()
        self.skipped = 0
        self.sent: list[float] = []
        self.latency_ms: list[float] = []
        self.status: list[int] = []
        self.start = 0.0

    def _done(self, began: float, status: int) -> None:
        self.sent.append(began)
        self.latency_ms.append(round((time.time() - began) * 1000, 3))
        self.status.append(status)

    def run(self) -> None:
        """Drive until ``stop`` is set (bounded: a request unanswered for 10 s fails)."""
        sel = selectors.DefaultSelector()
        idle: list[_Conn | None] = [None] * self.connections  # None: not connected yet
        busy: set[_Conn] = set()
        self.start = time.time()
        i = 0
        while not self.stop.is_set():
            now = time.time()
            behind = int((now - self.start - MAX_LAG_S) * self.rate)
            if behind > i:  # more than a second behind the schedule: skip ahead
                self.skipped += behind - i
                i = behind
            while idle and self.start + i / self.rate <= now:
                conn = idle.pop()
                if conn is None:
                    try:
                        sock = socket.create_connection((self.host, self.port), timeout=10)
                    except OSError:
                        self._done(now, 0)
                        idle.insert(0, None)
                        i += 1
                        continue
                    sock.setblocking(False)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conn = _Conn(sock)
                    sel.register(sock, selectors.EVENT_READ, conn)
                conn.began = now
                try:
                    conn.sock.send(self.requests[i % len(self.requests)])
                    busy.add(conn)
                except OSError:
                    self._fail(sel, conn, idle)
                i += 1
            wait = max(0.0, min(0.05, self.start + i / self.rate - time.time()))
            for key, _ in sel.select(wait if idle else 0.05):
                self._read(sel, key.data, idle, busy)
            now = time.time()
            for conn in [c for c in busy if now - c.began > 10]:
                busy.discard(conn)
                self._fail(sel, conn, idle)
        sel.close()

    def _read(self, sel: selectors.BaseSelector, conn: _Conn, idle: list[_Conn | None],
              busy: set[_Conn]) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            busy.discard(conn)
            self._fail(sel, conn, idle)
            return
        conn.buf += data
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = conn.buf[:end].split(b"\r\n")
        length = next((int(h.split(b":", 1)[1]) for h in head[1:]
                       if h[:15].lower() == b"content-length:"), 0)
        if len(conn.buf) < end + 4 + length:
            return
        conn.buf = conn.buf[end + 4 + length:]
        busy.discard(conn)
        self._done(conn.began, int(head[0].split()[1]))
        conn.began = 0.0
        if any(h.lower() == b"connection: close" for h in head[1:]):
            sel.unregister(conn.sock)
            conn.sock.close()
            idle.insert(0, None)
        else:
            idle.append(conn)

    def _fail(self, sel: selectors.BaseSelector, conn: _Conn,
              idle: list[_Conn | None]) -> None:
        if conn.began:
            self._done(conn.began, 0)
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        idle.insert(0, None)


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

"""The query load of the count's query-overhead run (issue #33): paced gets of a job's store.

    python -m benchmarks.query_driver --url http://127.0.0.1:PORT --users N --partitions P \
        --out FILE [--rate 1000] [--routed-share 0.9] [--connections 128] [--phase-s S]

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

With ``--phase-s S`` the load is on for S seconds, off for S, on again... (``--off-first``:
off, on, ...); at each phase's start the driver reads the job's progress (the sums of its
tasks' ``processed`` and ``commits`` from ``/status/process``, with the job's time of
reading them), so one run compares the job's rate with and without queries in interleaved
phases (:func:`phase_rates`): drift of a shared machine's load over minutes hits both alike,
which two separate runs do not get, and each on phase is compared with the off phases
beside it. A phase in
which a task committed is left out of both: the job's first commit comes at the same time in
every run, so it would always fall in the same kind of phase.
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


def phase_rates(marks: list[list[Any]], until: float | None = None) -> dict[str, Any] | None:
    """The job's msg/s with the load on and off from ``marks`` ([time, on, processed,
    commits] at each phase's start): intervals between consecutive marks in which the job was
    processing (processed above 0 at the start and, when ``until`` (the total) is given,
    below it at the end) and no task committed. ``pair_losses``: each such on phase's loss
    against the mean rate of the such off phases next to it (before and after), so a drift
    of the machine over the run cancels phase by phase. None without an interval of each
    kind."""
    done = {True: [0.0, 0], False: [0.0, 0]}  # on -> [seconds, records]
    rates: list[tuple[bool, float] | None] = []  # each interval: (on, msg/s), None: left out
    for (t0, on, p0, c0), (t1, _, p1, c1) in zip(marks, marks[1:], strict=False):
        if p0 is None or p1 is None or p0 <= 0 or t1 <= t0 or (until is not None and p1 >= until):
            rates.append(None)
            continue
        if c0 != c1:  # a commit inside: not a phase of processing alone
            rates.append(None)
            continue
        done[bool(on)][0] += t1 - t0
        done[bool(on)][1] += p1 - p0
        rates.append((bool(on), (p1 - p0) / (t1 - t0)))
    if not done[True][0] or not done[False][0]:
        return None
    on_rate, off_rate = done[True][1] / done[True][0], done[False][1] / done[False][0]
    pairs = []
    for i, phase in enumerate(rates):
        if phase is None or not phase[0]:
            continue
        beside = [n[1] for n in (rates[i - 1] if i else None,
                                 rates[i + 1] if i + 1 < len(rates) else None)
                  if n is not None and not n[0]]
        if beside:
            pairs.append(1 - phase[1] / (sum(beside) / len(beside)))
    return {"on_msgs_per_s": on_rate, "off_msgs_per_s": off_rate, "on_s": done[True][0],
            "off_s": done[False][0], "loss": 1 - on_rate / off_rate if off_rate else None,
            "pair_losses": pairs}


def progress(host: str, port: int) -> tuple[float | None, int | None, int | None]:
    """The job's own time of reading its progress and the sums of its tasks' ``processed``
    and ``commits``, from its ``/status/process`` (all None: no answer yet). The job's time,
    not the driver's: the request may wait for the run loop (``job.query.linger.ms``)."""
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=2)
    try:
        conn.request("GET", "/status/process")
        answer = conn.getresponse()
        if answer.status != 200:
            return None, None, None
        status = json.loads(answer.read())
        tasks = status["tasks"]
        return (float(status["time"]), sum(int(t.get("processed") or 0) for t in tasks),
                sum(int(t.get("commits") or 0) for t in tasks))
    except (OSError, ValueError, KeyError):
        return None, None, None
    finally:
        conn.close()


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

    def __init__(self, url: str, paths: list[str], rate: float, connections: int,
                 phase_s: float = 0.0, off_first: bool = False) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.requests = [f"GET {p} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
                         for p in paths]
        self.rate, self.connections = rate, connections
        self.phase_s = phase_s  # 0: always on
        self.off_first = off_first
        self.issued = 0  # requests sent: the next path's index
        self.marks: list[list[Any]] = []  # [time, on, processed, commits] at each phase's start
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
        began = self.start  # the current on-phase's start: its schedule's origin
        # the longest wait for answers when no request is due (a phase's change is one)
        no_request_s = min(0.05, self.phase_s / 4) if self.phase_s else 0.05
        phase = -1
        i = 0
        while not self.stop.is_set():
            now = time.time()
            on = True
            if self.phase_s:
                current = int((now - self.start) / self.phase_s)
                on = (current % 2 == 0) != self.off_first
                if current != phase:  # a phase starts: where the job is, then its load
                    phase = current
                    asked = time.time()
                    at, processed, commits = progress(self.host, self.port)
                    self.marks.append([at or asked, on, processed, commits])
                    now = began = time.time()
                    i = 0
            behind = int((now - began - MAX_LAG_S) * self.rate)
            if behind > i:  # more than a second behind the schedule: skip ahead
                self.skipped += behind - i
                i = behind
            while on and idle and began + i / self.rate <= now:
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
                    conn.sock.send(self.requests[self.issued % len(self.requests)])
                    self.issued += 1
                    busy.add(conn)
                except OSError:
                    self._fail(sel, conn, idle)
                i += 1
            wait = max(0.0, min(0.05, began + i / self.rate - time.time()))
            for key, _ in sel.select(wait if idle and on else no_request_s):
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
    p.add_argument("--phase-s", type=float, default=0.0,
                   help="on for this many seconds, then off as long, and so on, reading the "
                        "job's progress at each phase's start (default 0: always on)")
    p.add_argument("--off-first", action="store_true",
                   help="with --phase-s, begin with a phase without load")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    driver = Driver(a.url, paths(a.store, a.users, a.partitions, a.routed_share, 100_000),
                    a.rate, a.connections, a.phase_s, a.off_first)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: driver.stop.set())
    driver.run()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out: dict[str, Any] = {
        "url": a.url, "rate": a.rate, "connections": a.connections,
        "routed_share": a.routed_share, "started": driver.start, "stopped": time.time(),
        "skipped": driver.skipped, "cpu_s": usage.ru_utime + usage.ru_stime,
        "sent": driver.sent, "latency_ms": driver.latency_ms, "status": driver.status,
        "phase_s": a.phase_s, "off_first": a.off_first, "marks": driver.marks}
    a.out.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

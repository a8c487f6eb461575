"""millpond.query.wire: HTTP/1.1 connections on loopback served by whichever thread pumps
them: keep-alive and pipelining in order, bad requests, Connection: close, big answers
written across pumps, idle and surplus connections (an answer given later from another
thread and a failing handler: test_query_channel.py, beside the channel)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from millpond.query.wire import Request, Wire, frame


def ok(text: str) -> bytes:
    return frame(200, "text/plain", text.encode())


@dataclass
class Pumping:
    """The pumping thread of :func:`pumped`: its ident and each pump's count of requests
    handed on."""

    ident: int = 0
    counts: list[int] = field(default_factory=list)


@contextmanager
def pumped(on_request: Callable[[Request, Any], bytes | None], context: Any = None,
           max_requests: int = 64, make: Callable[..., Any] = Wire,
           **kwargs: Any) -> Iterator[tuple[Any, Pumping]]:
    """A wire (or what ``make`` makes with the same calls, e.g. a Channel) on a free port,
    pumped by a thread of its own until the block ends."""
    server = make("127.0.0.1", 0, on_request, **kwargs)
    stop = threading.Event()
    pumping = Pumping()

    def loop() -> None:
        pumping.ident = threading.get_ident()
        while not stop.is_set():
            with server.lock:
                pumping.counts.append(server.pump(0.01, context, max_requests))

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield server, pumping
    finally:
        stop.set()
        thread.join(5)
        server.close()


def read_responses(sock: socket.socket, n: int, timeout: float = 5.0) -> list[tuple[int, bytes]]:
    """``n`` responses (status, body) read off ``sock`` (Content-Length framed)."""
    sock.settimeout(timeout)
    buf = b""
    out: list[tuple[int, bytes]] = []
    while len(out) < n:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buf[:head_end].decode("latin-1").split("\r\n")
            length = int(next(h.split(":", 1)[1] for h in head
                              if h.lower().startswith("content-length")))
            if len(buf) >= head_end + 4 + length:
                out.append((int(head[0].split()[1]), buf[head_end + 4:head_end + 4 + length]))
                buf = buf[head_end + 4 + length:]
                continue
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {len(out)} of {n} responses"
        buf += chunk
    return out


def get(path: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode()


def test_keep_alive_and_pipelined_requests_are_answered_in_order_on_the_pumping_thread() -> None:
    seen: list[tuple[str, Any, int]] = []

    def on_request(request: Request, context: Any) -> bytes:
        seen.append((request.path, context, threading.get_ident()))
        return ok(request.path)

    with pumped(on_request, context="loop") as (wire, pumping):
        with socket.create_connection(wire.address) as sock:
            for i in range(3):  # one at a time on a kept-alive connection
                sock.sendall(get(f"/a{i}"))
                assert read_responses(sock, 1) == [(200, f"/a{i}".encode())]
            sock.sendall(b"".join(get(f"/p{i}") for i in range(20)))  # pipelined
            assert read_responses(sock, 20) == [(200, f"/p{i}".encode()) for i in range(20)]
    assert {(c, t) for _, c, t in seen} == {("loop", pumping.ident)}


def test_bad_requests_are_answered_and_closed() -> None:
    with pumped(lambda request, context: ok("fine")) as (wire, _):
        for raw, status in ((b"NOT HTTP AT ALL\r\n\r\n", 400),
                            (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 70_000, 431)):
            with socket.create_connection(wire.address) as sock:
                sock.sendall(raw)
                assert read_responses(sock, 1)[0][0] == status
                assert sock.recv(10) == b""  # and closed
        with socket.create_connection(wire.address) as sock:
            sock.sendall(get("/", "Connection: close\r\n"))
            assert read_responses(sock, 1) == [(200, b"fine")]
            assert sock.recv(10) == b""


def test_an_answer_bigger_than_the_socket_takes_is_written_across_pumps() -> None:
    big = bytes(range(256)) * (16 * 1024)  # 4 MiB

    def on_request(request: Request, context: Any) -> bytes:
        return frame(200, "application/octet-stream", big)

    with pumped(on_request) as (wire, _):
        with socket.create_connection(wire.address) as sock:
            sock.sendall(get("/big") + get("/big"))
            time.sleep(0.2)  # the client reads late: the kernel's buffers fill up
            assert read_responses(sock, 2, timeout=10) == [(200, big), (200, big)]


def test_idle_connections_are_closed_and_surplus_ones_refused() -> None:
    with pumped(lambda request, context: ok("x"), idle_timeout_s=0.3,
                max_connections=2) as (wire, _):
        a = socket.create_connection(wire.address)
        b = socket.create_connection(wire.address)
        a.sendall(get("/"))
        assert read_responses(a, 1) == [(200, b"x")]
        deadline = time.monotonic() + 5
        while wire.connections < 2:  # b accepted
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with socket.create_connection(wire.address) as c:  # a third: 503, closed
            status, body = read_responses(c, 1)[0]
            assert status == 503 and b"2 connections" in body
        b.settimeout(5)
        started = time.monotonic()
        assert b.recv(10) == b""  # silent: closed after its idle timeout (and the sweep)
        assert time.monotonic() - started < 3
        a.close()
        b.close()

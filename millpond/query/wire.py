"""HTTP/1.1 connections served by whichever thread calls :meth:`Wire.pump`, no thread each.

The endpoint's front process (:mod:`millpond.query.front`) runs one, so that a job's run loop
handles requests, not sockets (:mod:`millpond.query.channel` says why). Why not a thread per
connection (the stdlib ``ThreadingHTTPServer`` the endpoint began with): in a process whose
main thread is CPU-bound Python, every hand-over between it and a request's thread waits for
the GIL (up to the 5 ms switch interval) and costs a forced switch; at 1,000 gets/s that took
40-70% of a count job's throughput (benchmarks/results.md, issue #33). Here one thread pumps:
one ``select``, then each complete request handed on on that thread, no lock handed over and
no thread woken.

Requests are parsed by ``httptools`` (the C parser uvicorn uses, llhttp: the HTTP framing,
chunked bodies and malformed input handled by a well-kept library); this module keeps the
connections: accepting, reading, keep-alive, the order of answers on a connection, writing
what the socket did not take at once, and closing idle ones.

``on_request(request, context)`` answers a request with the bytes of a whole response, or
``None`` to answer it later from any thread with :meth:`Wire.respond` (a connection waits for
that answer before its next request is handed on: answers keep their requests' order).
"""

from __future__ import annotations

import collections
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import httptools

log = logging.getLogger("millpond.query")

MAX_HEAD = 64 * 1024  # a request's line and headers; more is answered 431 and closed
RECV = 64 * 1024
SWEEP_EVERY_S = 1.0  # how often idle connections are looked for
_STATUS_LINES = {int(s): f"HTTP/1.1 {int(s)} {s.phrase}\r\n".encode() for s in HTTPStatus}


def frame(status: int, content_type: str, body: bytes,
          headers: Iterable[tuple[str, str]] = (), close: bool = False) -> bytes:
    """A whole HTTP/1.1 response."""
    extra = "".join([f"{name}: {value}\r\n" for name, value in headers])
    return b"%sContent-Type: %s\r\nContent-Length: %d\r\nCache-Control: no-store\r\n%s%s\r\n%s" % (
        _STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status,
        content_type.encode("latin-1"), len(body), extra.encode("latin-1"),
        b"Connection: close\r\n" if close else b"", body)


def error_response(status: int, message: str,
                   headers: Iterable[tuple[str, str]] = ()) -> bytes:
    """A whole JSON error response (``{"error": message}``) that closes the connection."""
    body = json.dumps({"error": message}).encode()
    return frame(status, "application/json", body, headers, close=True)


def handle_safely(on_request: Callable[[Request, Any], bytes | None], request: Request,
                  context: Any) -> tuple[bytes | None, bool]:
    """``on_request``'s answer to ``request`` and False, or, when it raised, a 500 and True
    (close the connection after it): one bad request must not stop the pumping thread."""
    try:
        return on_request(request, context), False
    except Exception as exc:  # noqa: BLE001 - answered 500, the pump goes on
        log.warning("query %s failed: %s", request.path, exc, exc_info=True)
        return error_response(500, f"{type(exc).__name__}: {exc}"), True


class Waker:
    """A socket pair that makes a thread waiting in ``select`` on :attr:`reader` return:
    :meth:`wake` from any thread, :meth:`drain` by the waiting one."""

    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._writer.setblocking(False)

    def wake(self) -> None:
        try:
            self._writer.send(b"\0")
        except OSError:
            pass  # full: the waiting thread has a wake-up due anyway

    def drain(self) -> None:
        try:
            while self.reader.recv(4096):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.reader.close()
        self._writer.close()


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class Request:
    """One parsed request: ``headers`` by lower-case name."""

    method: str
    path: str
    headers: dict[str, str]
    keep_alive: bool
    conn: Any = field(repr=False)  # the wire's _Conn; the channel's (front, request id)


class _Conn:
    """One client connection and the parser reading it (httptools calls the ``on_*``)."""

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock = sock
        self.parser = httptools.HttpRequestParser(self)
        self.requests: collections.deque[Request] = collections.deque()
        self.out = bytearray()
        self.waiting = False  # a request of it is being answered elsewhere (respond())
        self.closing = False  # close once ``out`` is written
        self.closed = False
        self.events = 0  # what the selector watches it for (0: not registered)
        self.last = now
        self._url = bytearray()
        self._headers: dict[str, str] = {}
        self.unparsed = 0  # bytes fed since the last complete request

    # httptools' callbacks
    def on_message_begin(self) -> None:
        self._url.clear()
        self._headers = {}

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_message_complete(self) -> None:
        self.unparsed = 0
        self.requests.append(Request(
            self.parser.get_method().decode("latin-1"), self._url.decode("latin-1"),
            self._headers, bool(self.parser.should_keep_alive()), self))

    @property
    def head_too_big(self) -> bool:
        """More than MAX_HEAD bytes without a complete request (a GET has no body)."""
        return self.unparsed > MAX_HEAD


class _Reader:
    """Another socket the wire's selector watches: ``callback`` runs on the pumping thread
    when it is readable."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback


class Wire:
    """A listening socket and its connections, served by :meth:`pump` calls (one thread at a
    time: the caller holds :attr:`lock`)."""

    def __init__(self, host: str, port: int,
                 on_request: Callable[[Request, Any], bytes | None],
                 max_connections: int = 1024, idle_timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 listener: socket.socket | None = None) -> None:
        self.on_request = on_request
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.lock = threading.Lock()  # whoever pumps holds it
        self._clock = clock
        self._listener = listener if listener is not None else listen(host, port)
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, "listen")
        self._waker = Waker()
        self._selector.register(self._waker.reader, selectors.EVENT_READ, "wake")
        self._conns: set[_Conn] = set()
        self._ready: collections.deque[_Conn] = collections.deque()  # requests to hand on
        self._answered: collections.deque[tuple[Request, bytes]] = collections.deque()
        self._closed = False
        self._swept = clock()
        self._pumper: int | None = None  # the thread in pump() (respond() need not wake it)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        return len(self._conns)

    # ---- any thread ---------------------------------------------------------------------
    def respond(self, request: Request, data: bytes, close: bool = False) -> None:
        """The answer to a request ``on_request`` left for later; written by the next pump
        (``close``: then the connection is closed)."""
        if self._closed:
            return
        if close:
            request.keep_alive = False
        self._answered.append((request, data))
        if threading.get_ident() != self._pumper:
            self.wake()

    def wake(self) -> None:
        """Make a pump waiting in select() return now."""
        self._waker.wake()

    @property
    def writing(self) -> bool:
        """Whether answers wait to be written (given to :meth:`respond` or not yet taken by
        their sockets)."""
        return bool(self._answered) or any(conn.out for conn in self._conns)

    def add_reader(self, sock: socket.socket, callback: Callable[[], None]) -> None:
        """Watch ``sock`` too: ``callback()`` runs inside :meth:`pump` when it is readable
        (its answers given with :meth:`respond` are written by the same pump)."""
        self._selector.register(sock, selectors.EVENT_READ, _Reader(callback))

    def remove_reader(self, sock: socket.socket) -> None:
        """Stop watching a socket of :meth:`add_reader`."""
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass

    def stop_reading(self) -> None:
        """Accept no more connections and read no more requests; answers still go out."""
        with self.lock:
            try:
                self._selector.unregister(self._listener)
            except (KeyError, ValueError):
                pass
            for conn in list(self._conns):
                conn.closing = True
                conn.requests.clear()
                if not conn.waiting and not conn.out:
                    self._drop(conn)
                else:
                    self._watch(conn)

    # ---- the pumping thread -------------------------------------------------------------
    def pump(self, timeout: float, context: Any = None, max_requests: int = 64) -> int:
        """Serve what is ready now (waiting at most ``timeout`` s for something to be): new
        connections, requests read and answered (at most ``max_requests`` handed to
        ``on_request``, the rest left for the next pump), answers written. How many requests
        were handed on."""
        if self._closed:
            return 0
        now = self._clock()
        self._pumper = threading.get_ident()
        try:
            return self._pump(now, timeout, context, max_requests)
        finally:
            self._pumper = None

    def _pump(self, now: float, timeout: float, context: Any, max_requests: int) -> int:
        for key, mask in self._selector.select(0 if self._ready or self._answered
                                               else timeout):
            if type(key.data) is _Reader:
                key.data.callback()
            elif key.data == "listen":
                self._accept(now)
            elif key.data == "wake":
                self._waker.drain()
            else:
                conn: _Conn = key.data
                if mask & selectors.EVENT_WRITE:
                    self._write(conn)
                if mask & selectors.EVENT_READ and not conn.closed:
                    self._read(conn, now)
        while self._answered:
            request, data = self._answered.popleft()
            conn = request.conn
            conn.waiting = False
            if conn.closed:
                continue
            conn.last = now
            self._queue(request, data)
            self._write(conn)
            if conn.requests and not conn.closed:
                self._ready.append(conn)
        handed = self._hand_on(context, max_requests)
        if now - self._swept >= SWEEP_EVERY_S:
            self._sweep(now)
        return handed

    def close(self) -> None:
        """Close the listening socket and every connection; later answers are dropped."""
        self._closed = True
        for conn in list(self._conns):
            self._drop(conn)
        for sock in (self._listener, self._waker.reader):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
        self._listener.close()
        self._waker.close()
        self._selector.close()

    def _accept(self, now: float) -> None:
        for _ in range(64):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: leave it in the backlog
                log.warning("query endpoint: accept failed: %s", exc)
                return
            sock.setblocking(False)
            if len(self._conns) >= self.max_connections:
                try:
                    sock.send(error_response(503, f"the endpoint has {self.max_connections} "
                                          "connections open already; try again"))
                except OSError:
                    pass
                sock.close()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Conn(sock, now)
            self._conns.add(conn)
            self._watch(conn)

    def _read(self, conn: _Conn, now: float) -> None:
        try:
            data = conn.sock.recv(RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(conn)
            return
        if not data:  # the client is done sending: finish what it asked, then close
            conn.closing = True
            self._write(conn)
            return
        conn.last = now
        if conn.closing:
            return  # after a Connection: close request, nothing more is read
        conn.unparsed += len(data)
        try:
            conn.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(conn, 400, "upgrades are not served here")
            return
        except httptools.HttpParserError as exc:
            self._fail(conn, 400, f"malformed HTTP request: {exc}")
            return
        if conn.head_too_big:
            self._fail(conn, 431, f"request head over {MAX_HEAD} bytes")
            return
        if conn.requests and not conn.waiting:
            self._ready.append(conn)

    def _hand_on(self, context: Any, max_requests: int) -> int:
        handed = 0
        while self._ready and handed < max_requests:
            conn = self._ready.popleft()
            while conn.requests and not conn.waiting and not conn.closed:
                request = conn.requests.popleft()
                handed += 1
                data, failed = handle_safely(self.on_request, request, context)
                if failed:
                    conn.closing = True  # the answer says Connection: close
                    conn.requests.clear()
                if data is None:
                    conn.waiting = True
                    break
                self._queue(request, data)
                if handed >= max_requests:
                    break
            self._write(conn)
            if conn.requests and not conn.waiting and not conn.closed:
                self._ready.append(conn)  # over this pump's share: the next pump goes on
        return handed

    @staticmethod
    def _queue(request: Request, data: bytes) -> None:
        """``request``'s answer, next in its connection's output; after a request that does
        not keep the connection alive, nothing more is read or answered on it."""
        conn = request.conn
        conn.out += data
        if not request.keep_alive:
            conn.closing = True
            conn.requests.clear()

    def _write(self, conn: _Conn) -> None:
        """Send what the socket takes now; the rest when it is writable again."""
        if conn.closed:
            return
        if conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._drop(conn)
                return
            del conn.out[:sent]
        if not conn.out and conn.closing and not conn.waiting and not conn.requests:
            self._drop(conn)
            return
        self._watch(conn)

    def _watch(self, conn: _Conn) -> None:
        """Select on what ``conn`` waits for: reads unless it is closing, writes while
        ``out`` holds bytes the socket did not take."""
        events = (0 if conn.closing else selectors.EVENT_READ) | \
            (selectors.EVENT_WRITE if conn.out else 0)
        if events == conn.events:
            return
        if not events:
            self._selector.unregister(conn.sock)
        elif not conn.events:
            self._selector.register(conn.sock, events, conn)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _fail(self, conn: _Conn, status: int, message: str) -> None:
        conn.requests.clear()
        conn.closing = True
        if conn.waiting:  # its earlier request's answer goes first; this one is dropped
            return
        conn.out += error_response(status, message)
        self._write(conn)

    def _sweep(self, now: float) -> None:
        self._swept = now
        for conn in list(self._conns):
            if not conn.waiting and now - conn.last > self.idle_timeout_s:
                self._drop(conn)  # silent (or slow) this long, mid-request or kept alive

    def _drop(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.discard(conn)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass

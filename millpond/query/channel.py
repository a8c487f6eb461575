"""The job process's side of its query endpoint: one channel to the endpoint's front process.

Why a front process (:mod:`millpond.query.front`): the run loop answers a get between two
batches, when its caches are cold, and on it the two socket calls and the HTTP parsing of
every request cost more than the read and the answer (in the count job ~19 of ~34 µs a get,
benchmarks/results.md, issue #33). The front holds the connections and parses the requests;
the loop reads every request that came since its last turn with one ``recv`` on a Unix
socket pair and writes every answer with one ``send``. A thread could not do the front's
work: every socket call of it would wait for the run loop to hand over the GIL.

The job keeps the listening socket (so its port stays the job's while it runs) and passes it
to the front. The front lives as long as the channel: when the job process stops or dies,
the front answers what it still holds 503 and exits; when the front dies, the next pump
starts another on the same socket, RESTART_S after, or twice as long as the last wait (at
most MAX_RESTART_S) when the one that died had lived less than STEADY_S.

Frames on the channel: a 4-byte little-endian length, then ``marshal`` of
``(id, method, path, headers, keep_alive)`` (front -> job; ``headers``: those of
:data:`PASSED_HEADERS` the request had) or ``(id, response, close)`` (job -> front). Both
ends run the same interpreter, so ``marshal``'s format is theirs.
"""

from __future__ import annotations

import collections
import logging
import marshal
import selectors
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from millpond.query.wire import Request, Waker, handle_safely, listen

log = logging.getLogger("millpond.query")

PASSED_HEADERS = ("authorization", "millpond-forwarded")  # what the job reads of a request
RECV = 256 * 1024  # read at most this much of the channel per pump
RESTART_S = 1.0  # a front that died is started again this long after
MAX_RESTART_S = 60.0  # ... or up to this long, doubling, while fronts die young
STEADY_S = 10.0  # a front that lived this long died of something else: wait RESTART_S again
CLOSE_S = 5.0  # close(): how long the front gets to answer the rest and exit
ANSWER_TIMEOUT_S = 30.0  # the front answers 503 to a request the job left this long
_LEN = struct.Struct("<I")


def encode(message: tuple[Any, ...]) -> bytes:
    """One frame of the channel."""
    data = marshal.dumps(message)
    return _LEN.pack(len(data)) + data


def decode(buf: bytearray) -> list[Any]:
    """The whole frames at the start of ``buf``, removed from it (a partial one stays)."""
    out = []
    at, end = 0, len(buf)
    while end - at >= 4:
        (n,) = _LEN.unpack_from(buf, at)
        if end - at - 4 < n:
            break
        out.append(marshal.loads(buf[at + 4:at + 4 + n]))
        at += 4 + n
    if at:
        del buf[:at]
    return out


class Channel:
    """The endpoint's connections, held by a front process; :meth:`pump` hands the requests
    that came to ``on_request`` (which answers with a whole response's bytes, or None to
    answer later with :meth:`respond`), the same calls as :class:`millpond.query.wire.Wire`.
    One thread pumps at a time (it holds :attr:`lock`)."""

    def __init__(self, host: str, port: int,
                 on_request: Callable[[Request, Any], bytes | None],
                 max_connections: int = 1024, idle_timeout_s: float = 10.0,
                 answer_timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        self.on_request = on_request
        self.lock = threading.Lock()
        self._front_args = [str(max_connections), repr(idle_timeout_s), repr(answer_timeout_s)]
        self._listener = listen(host, port)
        self._selector = selectors.DefaultSelector()
        self._waker = Waker()
        self._selector.register(self._waker.reader, selectors.EVENT_READ)
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._generation = 0  # the front's: answers to an earlier one's requests are dropped
        self._started = float("-inf")
        self._lost_at = float("-inf")
        self.restart_s = RESTART_S  # the wait before the next start, once a front died
        self._in = bytearray()
        self._out = bytearray()
        self._ready: collections.deque[Request] = collections.deque()
        self._answered: collections.deque[tuple[Request, bytes]] = collections.deque()
        self._closed = False
        self.restarts = 0  # fronts that died (each started again)
        try:
            self._start()
        except OSError:
            self._listener.close()
            self._waker.close()
            self._selector.close()
            raise

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) it listens on."""
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def front_pid(self) -> int | None:
        """The front process's pid (None: none running)."""
        return self._proc.pid if self._proc is not None and self._sock is not None else None

    # ---- any thread ---------------------------------------------------------------------
    def respond(self, request: Request, data: bytes) -> None:
        """The answer to a request ``on_request`` left for later; sent by the next pump."""
        if self._closed:
            return
        self._answered.append((request, data))
        self._waker.wake()  # a pump waiting in select() returns now

    # ---- the pumping thread -------------------------------------------------------------
    def pump(self, timeout: float, context: Any = None, max_requests: int = 64) -> int:
        """Hand on the requests that came (at most ``max_requests``; the rest wait for the
        next pump) and send every answer; with nothing to do, wait at most ``timeout`` s for
        a request or an answer. How many requests were handed on."""
        if self._closed:
            return 0
        if self._sock is None:
            if time.monotonic() - self._lost_at < self.restart_s:
                if timeout > 0:
                    self._wait(timeout)  # no front yet: wait as asked, do not spin
                return 0
            try:
                self._start()
            except OSError as exc:  # e.g. out of processes or descriptors: not the job's end
                self._lost_at = time.monotonic()
                log.error("query endpoint: cannot start its front process: %s; trying again "
                          "in %gs", exc, self.restart_s)
                return 0
        if timeout > 0 and not self._ready and not self._answered:
            self._wait(timeout)
        if len(self._ready) < max_requests:
            self._receive()
        out = self._out
        while self._answered:
            request, data = self._answered.popleft()
            if request.conn[0] == self._generation:
                out += encode((request.conn[1], data, False))
        handed = 0
        ready = self._ready
        while ready and handed < max_requests:
            request = ready.popleft()
            handed += 1
            answer, close = handle_safely(self.on_request, request, context)
            if answer is not None:
                out += encode((request.conn[1], answer, close))
        if out:
            self._send()
        return handed

    def _wait(self, timeout: float) -> None:
        """At most ``timeout`` s for the front's requests or an answer from a worker."""
        if self._selector.select(timeout):
            self._waker.drain()

    def _receive(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            chunk = sock.recv(RECV)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(str(exc))
            return
        if not chunk:
            self._lost("it closed the channel")
            return
        self._in += chunk
        generation = self._generation
        for rid, method, path, headers, keep_alive in decode(self._in):
            self._ready.append(Request(method, path, headers, keep_alive, (generation, rid)))

    def _send(self) -> None:
        sock = self._sock
        if sock is None:
            self._out.clear()
            return
        try:
            sent = sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return  # the front is behind: the rest goes with the next pump
        except OSError as exc:
            self._lost(str(exc))
            return
        del self._out[:sent]

    def _start(self) -> None:
        """A front process on the listening socket, and the channel to it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "millpond.query.front", str(self._listener.fileno()),
                 str(theirs.fileno()), *self._front_args],
                pass_fds=(self._listener.fileno(), theirs.fileno()),
                stdin=subprocess.DEVNULL,
                process_group=0)  # a Ctrl-C at the terminal is the job's to handle
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._selector.register(ours, selectors.EVENT_READ)
        self._generation += 1
        self._started = time.monotonic()

    def _lost(self, why: str) -> None:
        """The front is gone (``why``): what it held is dropped; the next pump starts
        another after :attr:`restart_s`."""
        sock, proc = self._sock, self._proc
        self._sock = None
        if sock is not None:
            self._selector.unregister(sock)
            sock.close()
        self._in.clear()
        self._out.clear()
        self._ready.clear()
        code = None
        if proc is not None:
            try:
                code = proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait(timeout=5)
        if self._closed:
            return
        now = time.monotonic()
        lived = now - self._started
        if self.restarts and lived < STEADY_S:
            self.restart_s = min(MAX_RESTART_S, self.restart_s * 2)
        else:
            self.restart_s = RESTART_S
        self._lost_at = now
        self.restarts += 1
        log.error("query endpoint: its front process (pid %s) stopped after %.1fs (%s; exit "
                  "code %s): another starts on the same port in %gs; the requests it held "
                  "are lost", proc.pid if proc is not None else "?", lived, why, code,
                  self.restart_s)

    def close(self) -> None:
        """Send what is left, let the front answer the rest 503 and exit (at most
        ``CLOSE_S``), then close the listening socket: later answers are dropped."""
        if self._closed:
            return
        self._closed = True
        sock, proc = self._sock, self._proc
        deadline = time.monotonic() + CLOSE_S
        if sock is not None:
            try:
                sock.settimeout(max(0.1, deadline - time.monotonic()))  # blocking, bounded
                if self._out:
                    sock.sendall(self._out)
                sock.shutdown(socket.SHUT_RDWR)  # the front sees the end of the channel
            except OSError:
                pass
        if proc is not None:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("query endpoint: its front process (pid %d) did not exit within "
                            "%gs; killed", proc.pid, CLOSE_S)
                proc.kill()
                proc.wait(timeout=5)
        if sock is not None:
            sock.close()
        self._listener.close()
        self._waker.close()
        self._selector.close()

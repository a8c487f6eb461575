"""The query endpoint's front process: the HTTP connections of one job process, kept out of it.

    python -m millpond.query.front LISTENER_FD CHANNEL_FD MAX_CONNECTIONS IDLE_S ANSWER_S

Started by :class:`millpond.query.channel.Channel` with the job's listening socket and one end
of a socket pair. It accepts, reads and parses requests (:class:`millpond.query.wire.Wire`),
sends each to the job over the channel and writes the job's answers back, in each
connection's order. It exits when the channel ends (the job stopped or died), after answering
what it still held 503. It runs in a process group of its own (a Ctrl-C at the terminal
reaches the job alone) and ignores SIGINT and SIGTERM: stopping is the job's. A request the
job has not answered within ANSWER_S seconds (the job is stopped or hung) is answered 503.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
import time
from typing import Any

from millpond.query.channel import PASSED_HEADERS, decode, encode
from millpond.query.wire import Request, Wire, error_response

log = logging.getLogger("millpond.query.front")

PUMP_S = 0.5  # the longest wait for sockets between two looks at late answers
FLUSH_S = 2.0  # at the end: how long answers get to be written


class Front:
    """Requests from ``wire`` to the job over ``channel``, answers back; one thread: the
    channel is one more socket of the wire's selector."""

    def __init__(self, listener: socket.socket, channel: socket.socket, max_connections: int,
                 idle_timeout_s: float, answer_timeout_s: float) -> None:
        self.channel = channel
        self.answer_timeout_s = answer_timeout_s
        self.wire = Wire("", 0, self._forward, max_connections=max_connections,
                         idle_timeout_s=idle_timeout_s, listener=listener)
        self.wire.add_reader(channel, self._answers)
        self._pending: dict[int, tuple[Request, float]] = {}  # id -> (request, sent at)
        self._next = 0
        self._outgoing = bytearray()  # this pump's requests, sent to the job after it
        self._in = bytearray()
        self.ended = False  # the channel ended

    def _forward(self, request: Request, context: Any) -> None:
        """A request for the job (sent after this pump); its answer comes back through
        :meth:`_answers`."""
        self._next += 1
        headers = request.headers
        passed = {name: headers[name] for name in PASSED_HEADERS if name in headers}
        self._pending[self._next] = (request, time.monotonic())
        self._outgoing += encode((self._next, request.method, request.path, passed,
                                  request.keep_alive))
        return None

    def _send(self) -> None:
        """The requests of the last pump, to the job (blocking: the job reads every turn)."""
        if self._outgoing and not self.ended:
            try:
                self.channel.sendall(self._outgoing)
            except OSError:
                self.ended = True  # the job is gone; run() answers what is pending
                self.wire.remove_reader(self.channel)
        self._outgoing.clear()

    def _answers(self) -> None:
        """The channel is readable: the job's answers, handed to the wire (or its end)."""
        try:
            chunk = self.channel.recv(1 << 18)
        except OSError:
            chunk = b""
        if not chunk:
            self.ended = True
            self.wire.remove_reader(self.channel)
            return
        self._in += chunk
        for rid, data, close in decode(self._in):
            got = self._pending.pop(rid, None)
            if got is not None:  # else answered 503 already (_expire)
                self.wire.respond(got[0], data, close)

    def _expire(self, now: float, message: str, older_than: float) -> None:
        """Answer 503 to the requests sent before ``now - older_than``."""
        late = []
        for rid, (_request, sent) in self._pending.items():
            if now - sent < older_than:
                break  # in the order they were sent
            late.append(rid)
        for rid in late:
            self.wire.respond(self._pending.pop(rid)[0],
                              error_response(503, message, [("Retry-After", "1")]), close=True)

    def run(self) -> None:
        """Serve until the channel ends, then answer what is left and exit."""
        timeout = min(PUMP_S, self.answer_timeout_s / 2)
        wire = self.wire
        while not self.ended:
            with wire.lock:
                wire.pump(timeout, None, max_requests=1024)
            self._send()
            if self._pending:
                self._expire(time.monotonic(),
                             f"the job process did not answer within "
                             f"{self.answer_timeout_s:g}s (stopped or hung); try again",
                             self.answer_timeout_s)
        wire.stop_reading()
        self._expire(time.monotonic(), "the job process stopped; try another process of "
                                       "the job", 0.0)
        deadline = time.monotonic() + FLUSH_S
        with wire.lock:
            while wire.writing and time.monotonic() < deadline:
                wire.pump(0.05, None)
            wire.close()
        self.channel.close()


def main(argv: list[str]) -> int:
    """Run the front on the inherited descriptors named by ``argv``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    listener_fd, channel_fd, max_connections, idle_s, answer_s = argv
    listener = socket.socket(fileno=int(listener_fd))
    listener.setblocking(False)
    channel = socket.socket(fileno=int(channel_fd))
    Front(listener, channel, int(max_connections), float(idle_s), float(answer_s)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

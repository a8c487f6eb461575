"""millpond.query.channel and .front: a job process's endpoint with its connections held by
a front process: requests and answers through the channel in each connection's order (an
answer given later from another thread, by the wire alone and through the channel), a
pump's share, answers from another thread, a front that dies started again on the same
port, a job that stops or dies taking its front with it, and a request the job leaves
answered 503."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from millpond.query.channel import Channel, decode, encode
from millpond.query.wire import Request
from tests.unit.test_query_wire import Pumping, get, ok, read_responses
from tests.unit.test_query_wire import pumped as wire_pumped


def pumped(on_request: Callable[[Request, Any], bytes | None], context: Any = "loop",
           **kwargs: Any) -> AbstractContextManager[tuple[Channel, Pumping]]:
    """A channel (and its front) on a free port, pumped by a thread of its own."""
    return wire_pumped(on_request, context, make=Channel, **kwargs)


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def bindable(port: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                s.listen(1)
                return True
            except OSError:
                time.sleep(0.05)
    return False


def test_frames_survive_any_split() -> None:
    data = b"".join(encode((i, "GET", f"/p{i}", {"authorization": "x"}, True)) for i in range(5))
    for cut in range(len(data) + 1):
        buf = bytearray(data[:cut])
        got = decode(buf)
        buf += data[cut:]
        got += decode(buf)
        assert got == [(i, "GET", f"/p{i}", {"authorization": "x"}, True) for i in range(5)]
        assert buf == b""


def test_requests_and_answers_go_through_the_front_in_each_connections_order() -> None:
    seen: list[tuple[str, Any, dict[str, str], int]] = []

    def on_request(request: Request, context: Any) -> bytes:
        seen.append((request.path, context, request.headers, threading.get_ident()))
        return ok(request.path)

    with pumped(on_request) as (channel, _):
        assert channel.front_pid is not None and channel.front_pid != os.getpid()
        with socket.create_connection(channel.address) as a, \
                socket.create_connection(channel.address) as b:
            a.sendall(b"".join(get(f"/a{i}", "Authorization: Bearer t\r\n") for i in range(10)))
            b.sendall(b"".join(get(f"/b{i}", "Millpond-Forwarded: 1\r\nX-Other: y\r\n")
                               for i in range(10)))
            assert read_responses(a, 10) == [(200, f"/a{i}".encode()) for i in range(10)]
            assert read_responses(b, 10) == [(200, f"/b{i}".encode()) for i in range(10)]
    assert {c for _, c, _, _ in seen} == {"loop"}
    assert len({t for *_, t in seen}) == 1  # the pumping thread answered every one
    headers = {p[1]: h for p, _, h, _ in seen}
    assert headers["a"] == {"authorization": "Bearer t"}  # only the headers the job reads
    assert headers["b"] == {"millpond-forwarded": "1"}


def test_a_pump_hands_on_its_share_and_leaves_the_rest_for_the_next() -> None:
    with pumped(lambda request, context: ok("x"), max_requests=2) as (channel, pumping):
        socks = [socket.create_connection(channel.address) for _ in range(7)]
        try:
            for s in socks:
                s.sendall(get("/"))
            for s in socks:
                assert read_responses(s, 1) == [(200, b"x")]
        finally:
            for s in socks:
                s.close()
    assert sum(pumping.counts) == 7 and max(pumping.counts) == 2


@pytest.mark.parametrize("serve", [wire_pumped, pumped], ids=["wire", "channel"])
def test_an_answer_given_later_from_another_thread_keeps_the_order_of_the_connection(
        serve: Callable[..., Any]) -> None:
    later: list[Request] = []

    def on_request(request: Request, context: Any) -> bytes | None:
        if request.path == "/slow":
            later.append(request)
            return None
        return ok(request.path)

    with serve(on_request) as (server, _):
        with socket.create_connection(server.address) as sock:
            sock.sendall(get("/slow") + get("/fast"))
            deadline = time.monotonic() + 5
            while not later:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            sock.settimeout(0.3)
            try:
                early = sock.recv(100)  # /fast waits behind /slow
            except TimeoutError:
                early = b""
            assert early == b""
            threading.Thread(target=server.respond, args=(later[0], ok("slow!"))).start()
            assert read_responses(sock, 2) == [(200, b"slow!"), (200, b"/fast")]


@pytest.mark.parametrize("serve", [wire_pumped, pumped], ids=["wire", "channel"])
def test_a_failing_handler_answers_500_and_closes_that_connection(
        serve: Callable[..., Any]) -> None:
    def on_request(request: Request, context: Any) -> bytes:
        if request.path == "/boom":
            raise RuntimeError("broken")
        return ok("fine")

    with serve(on_request) as (server, _):
        with socket.create_connection(server.address) as sock:
            sock.sendall(get("/boom"))
            status, body = read_responses(sock, 1)[0]
            assert status == 500 and b"RuntimeError: broken" in body
            sock.settimeout(5)
            assert sock.recv(10) == b""
        with socket.create_connection(server.address) as sock:
            sock.sendall(get("/"))
            assert read_responses(sock, 1) == [(200, b"fine")]


def test_a_front_that_dies_is_started_again_on_the_same_port() -> None:
    with pumped(lambda request, context: ok("here")) as (channel, _):
        address, first = channel.address, channel.front_pid
        assert first is not None
        with socket.create_connection(address) as sock:
            sock.sendall(get("/"))
            assert read_responses(sock, 1) == [(200, b"here")]  # the front is up
            os.kill(first, signal.SIGINT)  # stopping is the job's: the front ignores these
            os.kill(first, signal.SIGTERM)
            sock.sendall(get("/"))
            assert read_responses(sock, 1) == [(200, b"here")]
        assert channel.front_pid == first and channel.restarts == 0
        os.kill(first, signal.SIGKILL)
        assert gone(first)
        deadline = time.monotonic() + 10
        while channel.front_pid in (first, None):
            assert time.monotonic() < deadline, "no front started again"
            time.sleep(0.02)
        assert channel.restarts == 1 and channel.address == address
        with socket.create_connection(address) as sock:
            sock.sendall(get("/"))
            assert read_responses(sock, 1) == [(200, b"here")]


def test_closing_answers_what_the_front_holds_503_and_frees_the_port() -> None:
    handed: list[Request] = []

    def never(request: Request, context: Any) -> None:
        handed.append(request)  # a worker's, say, that the job stops before answering
        return None

    with pumped(never) as (channel, _):
        port, front = channel.address[1], channel.front_pid
        assert front is not None
        sock = socket.create_connection(channel.address)
        sock.sendall(get("/waits"))
        deadline = time.monotonic() + 5
        while not handed:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    # the block closed the channel
    status, body = read_responses(sock, 1)[0]
    assert status == 503 and b"the job process stopped" in body
    sock.close()
    assert gone(front, within=1.0)
    assert bindable(port, within=1.0)


def test_a_request_the_job_leaves_is_answered_503_by_the_front() -> None:
    with pumped(lambda request, context: None, answer_timeout_s=0.5) as (channel, _):
        with socket.create_connection(channel.address) as sock:
            started = time.monotonic()
            sock.sendall(get("/"))
            status, body = read_responses(sock, 1)[0]
            assert status == 503 and b"did not answer within 0.5s" in body
            assert 0.5 <= time.monotonic() - started < 5


def test_fronts_that_die_young_are_started_again_ever_more_slowly(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import millpond.query.channel as module

    monkeypatch.setattr(module, "RESTART_S", 0.05)
    monkeypatch.setattr(sys, "executable", "/bin/false")  # a front that cannot start
    with pumped(lambda request, context: ok("x")) as (channel, _):
        deadline = time.monotonic() + 10
        while channel.restarts < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        waits = [r.getMessage() for r in caplog.records if "front process" in r.getMessage()]
    assert "exit code 1" in waits[0] and "in 0.05s" in waits[0]
    assert [w.split(" in ")[-1].split("s;")[0] for w in waits[:4]] == ["0.05", "0.1", "0.2",
                                                                        "0.4"]


def test_a_pump_without_a_front_waits_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog pumps with a timeout in a loop: while no front runs, a pump must wait
    that long, not return at once (a spinning thread)."""
    import millpond.query.channel as module

    monkeypatch.setattr(module, "RESTART_S", 30.0)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    channel = Channel("127.0.0.1", 0, lambda request, context: ok("x"))
    try:
        deadline = time.monotonic() + 10
        while channel.restarts < 1:
            assert time.monotonic() < deadline
            channel.pump(0.05)
        assert channel.front_pid is None
        for _ in range(3):
            started = time.monotonic()
            assert channel.pump(0.2) == 0
            assert time.monotonic() - started >= 0.15
        # a start that fails (out of processes, say) is logged and tried again later; the
        # run loop's pump does not raise
        monkeypatch.setattr(module.subprocess, "Popen", _no_process)
        channel.restart_s = 0.0
        assert channel.pump(0.0) == 0 and channel.front_pid is None
    finally:
        channel.close()


def _no_process(*args: Any, **kwargs: Any) -> Any:
    raise BlockingIOError(11, "Resource temporarily unavailable")


JOB = """
import sys, time
from millpond.query.channel import Channel
channel = Channel("127.0.0.1", 0, lambda request, context: b"")
print(channel.address[1], channel.front_pid, flush=True)
time.sleep(60)
"""


def test_a_job_process_killed_takes_its_front_and_port_with_it() -> None:
    job = subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None
        port, front = (int(x) for x in job.stdout.readline().split())
        assert not gone(front, within=0.2)
        with socket.socket() as s:  # the port is taken while the job runs
            with pytest.raises(OSError):
                s.bind(("127.0.0.1", port))
        job.kill()
        assert job.wait(timeout=10) == -signal.SIGKILL
        assert gone(front, within=5.0)
        assert bindable(port, within=5.0)
    finally:
        job.kill()
        job.wait(timeout=10)

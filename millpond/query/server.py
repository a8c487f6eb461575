"""The HTTP side of the query endpoint: JSON in and out; the connections are the front
process's (:mod:`millpond.query.channel`).

Endpoints (every one a GET; ``<p>`` is a partition, i.e. the task ``Partition <p>``)::

    /stores                                   the job's stores
    /stores/<store>/<p>/get?key=K             one key: {"key", "value", "found"}
    /stores/<store>/<p>/get-many?key=A&key=B  {"entries": [{"key", "value"}], "missing": [...]}
    /stores/<store>/<p>/range?from=A&to=B     entries with A <= key < B (either may be left
                                              out), in key order
    /stores/<store>/<p>/prefix?prefix=P       entries whose serialized key starts with P's

Without the partition (``/stores/<store>/get?key=K``, ``get-many``, ``range``, ``prefix``)
any process answers: a get finds each key's partition with the job's partitioner, a scan
asks every partition and merges the pages in key order under one limit and one token; a
partition held by another process is forwarded there (:mod:`millpond.query.routing`), and
the ``Millpond-Served-By`` header names the endpoint(s) that answered.

Every query takes ``committed=1``: the store as of its task's last commit rather than what
the task has processed (:mod:`millpond.query.reads`).

A scan takes ``limit`` (default 100, at most 10,000) and answers ``next``: null at the end,
else a token that ``&next=<token>`` turns into the following page. A key is read by the
store's key serde (:mod:`millpond.query.render`). Status codes: 400 for a malformed
request, 401 without the endpoint's token when it has one (``job.query.token``: every
request but the page at ``/`` carries ``Authorization: Bearer <token>``), 404 for an unknown store (naming the stores) or path, 503 when the partition's task
is not open in this process (not assigned here, or still restoring: with the restore's
progress) or the job is starting or stopping, or when ``MAX_REQUESTS`` requests already
wait on worker threads (answered at once).

The job's page (``/``) and its ``/status`` are :mod:`millpond.query.page`'s.

Every read of a store happens on the run loop's thread: it takes the requests that came
between two batches (:meth:`QueryServer.pump`) and answers a query of a partition held here
at once;
the worker threads (forwards, scans of every partition, the page) read through
:mod:`millpond.query.mailbox`.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import orjson

from millpond.query.channel import Channel
from millpond.query.errors import QueryError
from millpond.query.mailbox import Mailbox
from millpond.query.page import StatusPage, is_public
from millpond.query.reads import (
    Answer,
    Directory,
    Query,
    answer_safely,
    get_one,
    safely,
    token,
    untoken,
)
from millpond.query.render import BadKey, parse_key
from millpond.query.routing import FORWARDED, SERVED_BY, Router, advertised_url, not_assigned
from millpond.query.wire import Request, frame
from millpond.serdes import Serde

log = logging.getLogger("millpond.query")

DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
MAX_KEYS = 1_000
FAN_OUT_THREADS = 16  # per request without a partition: partitions asked side by side
MAX_REQUESTS = 32  # requests on worker threads at once; above it: 503 at once
MAX_CONNECTIONS = 1024  # connections open at once; above it: 503 and closed
IDLE_TIMEOUT_S = 10.0  # a connection silent this long (mid-request or kept alive) is closed
STALL_S = 0.25  # the run loop not pumping this long: the watchdog thread pumps instead
WATCH_SELECT_S = 0.05  # the watchdog's wait for sockets, between checks for the run loop
STOP_JOIN_S = 5.0  # stop() waits at most this long for the watchdog to end

Serdes = Mapping[str, tuple[Serde[Any], Serde[Any]]]


class BadRequest(ValueError):
    """A request the endpoint cannot read: 400 with this message."""


def parse_request(path: str, serdes: Serdes) -> Query | Answer:
    """The query ``path`` (with its query string) asks, or the answer that refuses it."""
    parts = urlsplit(path)
    segments = [unquote(s) for s in parts.path.strip("/").split("/") if s]
    params = parse_qs(parts.query, keep_blank_values=True)
    if segments == ["stores"]:
        return Answer(200, {"stores": sorted(serdes)})
    if len(segments) != 4 or segments[0] != "stores":
        return Answer(404, {"error": f"no such endpoint {parts.path!r}; see /stores/<store>/"
                                     "<partition>/get|get-many|range|prefix"})
    _, store, partition_text, op = segments
    if store not in serdes:
        return Answer(404, {"error": f"unknown store {store!r}", "stores": sorted(serdes)})
    if not partition_text.isdigit():
        return Answer(400, {"error": f"partition {partition_text!r} is not a number"})
    partition = int(partition_text)
    key_serde = serdes[store][0]
    try:
        committed = _flag(params, "committed")
        if op in ("get", "get-many"):
            texts = params.get("key", [])
            if not texts or (op == "get" and len(texts) > 1):
                raise BadRequest(f"{op} takes {'one key' if op == 'get' else 'keys'} (?key=)")
            if len(texts) > MAX_KEYS:
                raise BadRequest(f"at most {MAX_KEYS} keys per request")
            keys = tuple(parse_key(key_serde, t) for t in texts)
            return Query(store, partition, "get", keys=keys, committed=committed)
        limit = _limit(params)
        after = _one(params, "next")
        tokens = _one(params, "tokens") == "1"
        if op == "range":
            start_text, end_text = _one(params, "from"), _one(params, "to")
            start = parse_key(key_serde, start_text) if start_text is not None else b""
            end = parse_key(key_serde, end_text) if end_text is not None else None
            if after is not None:
                resume = untoken(after)
                if resume < start or (end is not None and resume >= end):
                    raise BadRequest("the continuation token is not from this range")
                start = resume
            return Query(store, partition, "range", start=start, end=end, limit=limit,
                         tokens=tokens, committed=committed)
        if op == "prefix":
            text = _one(params, "prefix")
            if text is None:
                raise BadRequest("prefix takes ?prefix=")
            prefix = parse_key(key_serde, text)
            start = b""
            if after is not None:
                start = untoken(after)
                if not start.startswith(prefix):
                    raise BadRequest("the continuation token is not from this prefix")
            return Query(store, partition, "prefix", start=start, prefix=prefix, limit=limit,
                         tokens=tokens, committed=committed)
    except (BadRequest, BadKey, ValueError) as exc:
        return Answer(400, {"error": str(exc)})
    return Answer(404, {"error": f"no such query {op!r}; get, get-many, range or prefix"})


def _one(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(f"{name} given {len(values)} times")
    return values[0]


def _flag(params: dict[str, list[str]], name: str) -> bool:
    text = _one(params, name)
    if text not in (None, "0", "1", "true", "false"):
        raise BadRequest(f"{name} is 1 or 0 (true or false), got {text!r}")
    return text in ("1", "true")


def _limit(params: dict[str, list[str]]) -> int:
    text = _one(params, "limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise BadRequest(f"limit must be a number from 1 to {MAX_LIMIT}, got {text!r}")
    return int(text)


def single(answer: Answer) -> Answer:
    """A one-key get's answer as {"key", "value", "found"}."""
    body = answer.body
    if answer.status != 200:
        return answer
    head: dict[str, Any] = {k: body[k] for k in ("store", "partition", "committed") if k in body}
    if body["entries"]:
        entry = body["entries"][0]
        return Answer(200, {**head, "key": entry["key"], "value": entry["value"],
                            "found": True})
    return Answer(200, {**head, "key": body["missing"][0], "value": None, "found": False})


class QueryServer:
    """The endpoint of one job process. Its requests (from the front process that holds the
    connections) are taken by the run loop's thread between two batches (:meth:`pump`,
    called from :meth:`Mailbox.serve`; while the loop is busy, at most once per
    ``linger_s``), which answers a query of a partition held here at once; what needs more
    (a forward to another process, a scan of every partition, the page, ``/status``) goes
    to a worker thread
    (at most ``max_requests`` at a time, else 503 at once), which reads through ``mailbox``
    and, with a ``router``, forwards what another process holds. While the run loop has not
    pumped for ``STALL_S`` (starting, restoring a big store, a long commit, stopping), a
    watchdog thread pumps instead and hands every request to the workers."""

    def __init__(self, host: str, port: int, serdes: Serdes, mailbox: Mailbox,
                 router: Router | None = None, token: str | None = None,
                 max_requests: int = MAX_REQUESTS, linger_s: float = 0.0) -> None:
        self.serdes = serdes
        self.mailbox = mailbox
        self.router = router
        self.token = token  # job.query.token: the bearer token requests need (see authorized)
        self.page: StatusPage | None = None  # the job's page and /status (query.page)
        self.max_requests = max_requests
        self.linger_s = linger_s  # job.query.linger.ms: the busy loop's pumps this far apart
        self._pumped_at = float("-inf")
        try:
            self._wire = Channel(host, port, self._on_request,
                                 max_connections=MAX_CONNECTIONS, idle_timeout_s=IDLE_TIMEOUT_S)
        except OSError as exc:
            raise QueryError(f"job.query.address: cannot listen on {host}:{port}: "
                             f"{exc.strerror or exc}") from exc
        self._url = advertised_url(*self._wire.address)  # in every answer: asked once
        self._workers = ThreadPoolExecutor(max_requests, thread_name_prefix="millpond-query")
        self._slots = threading.BoundedSemaphore(max_requests)
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.pumped = 0  # requests the run loop's pumps handed on
        self.pump_cpu_s = 0.0  # the run loop's thread's CPU seconds in them
        mailbox.attach(self.pump)

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) it listens on (the port the OS picked for port 0)."""
        return self._wire.address

    @property
    def url(self) -> str:
        """The URL this endpoint publishes (``*`` for a wildcard host)."""
        return self._url

    def start(self) -> None:
        """Serve: the watchdog thread until the run loop pumps."""
        self._thread = threading.Thread(target=self._watch, name="millpond-query", daemon=True)
        self._thread.start()
        host, port = self.address
        log.info("query endpoint on http://%s:%d/stores", host, port)

    def stop(self) -> None:
        """Answer waiting queries 503, stop serving, close the socket and every open
        (keep-alive) connection, and wait (at most STOP_JOIN_S) for the threads to end."""
        self.mailbox.close()
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)
        self._workers.shutdown(wait=True, cancel_futures=True)  # each bounded: forwards time out
        with self._wire.lock:
            self._wire.close()
        log.info("query endpoint stopped: the run loop served %d requests in %.3f CPU s",
                 self.pumped, self.pump_cpu_s)

    def pump(self, directory: Directory | None, busy: bool = False) -> None:
        """Serve the connections now, on the calling thread (the run loop's, with the
        ``directory`` of its open tasks); skipped while the watchdog is pumping, and while
        the loop is ``busy`` within ``linger_s`` of its last pump (job.query.linger.ms):
        requests wait to be answered together, which costs the loop less than a few at a
        time between every two batches."""
        now = time.monotonic()
        if busy and now - self._pumped_at < self.linger_s:
            return
        self._pumped_at = now
        if self._wire.lock.acquire(blocking=False):
            began = time.thread_time()
            try:
                self.pumped += self._wire.pump(0.0, directory)
            finally:
                self._wire.lock.release()
                self.pump_cpu_s += time.thread_time() - began

    def _watch(self) -> None:
        """Pump while the run loop does not: before it runs, while it is stalled, after it."""
        while not self._stopped.is_set():
            if self.mailbox.served_within(STALL_S):
                self._stopped.wait(STALL_S / 2)
                continue
            with self._wire.lock:
                if not self._stopped.is_set():
                    self._wire.pump(WATCH_SELECT_S, None)

    def _on_request(self, request: Request, directory: Directory | None) -> bytes | None:
        """The response to ``request`` now, or None when a worker answers it
        (``directory``: the run loop's, when it is the one pumping)."""
        if request.method != "GET":
            return frame(405, "application/json",
                         b'{"error": "only GET is served here"}', [("Allow", "GET")])
        path = request.path
        if not self.authorized(path, request.headers.get("authorization")):
            return _unauthorized()
        if directory is not None:  # the run loop's thread: a query it can answer now
            quick = self._inline(path, FORWARDED.lower() in request.headers, directory)
            if quick is not None:
                return _response(*quick)
        if not self._slots.acquire(blocking=False):
            body = json.dumps({"error": f"the endpoint is serving {self.max_requests} "
                                        "requests already; try again"}).encode()
            return frame(503, "application/json", body, [("Retry-After", "1")])
        try:
            self._workers.submit(self._work, request)
        except RuntimeError:  # stopping: no new work
            self._slots.release()
            return frame(503, "application/json", b'{"error": "the job is stopping"}',
                         close=True)
        return None

    def _work(self, request: Request) -> None:
        """A worker's request: answered with the blocking paths, handed back to the wire."""
        try:
            page = self.page
            reply = page.serve(request.path) if page is not None else None
            if reply is not None:  # the page, its files or /status
                data = frame(reply.status, reply.content_type, reply.body,
                             [(SERVED_BY, self.url)])
            else:
                try:
                    answer_, served_by = self.handle(
                        request.path, forwarded=FORWARDED.lower() in request.headers)
                except Exception as exc:  # noqa: BLE001 - one bad request, answered 500
                    log.warning("query %s failed: %s", request.path, exc, exc_info=True)
                    answer_ = Answer(500, {"error": f"{type(exc).__name__}: {exc}"})
                    served_by = self.url
                data = _response(answer_, served_by)
        finally:
            self._slots.release()
        self._wire.respond(request, data)

    def _inline(self, path: str, forwarded: bool,
                directory: Directory) -> tuple[Answer, str] | None:
        """A query of one partition held here (or a routed get whose key is), answered on
        the run loop's thread; None for anything else (a worker's)."""
        plain_get = _plain_get(path)
        if plain_get is not None:  # the common query, read without the general parser
            store, partition, text = plain_get
            serdes = self.serdes.get(store)
            if serdes is None:
                return None
            try:
                key = parse_key(serdes[0], text)
                if partition is None:
                    if self.router is None:
                        return None
                    partition, forwarded = self.router.partition(key), False
            except (BadKey, ValueError, LookupError):
                return None  # the worker's path answers the error
            got = safely(get_one, store, partition, key, directory)
        else:
            segments = [s for s in urlsplit(path).path.strip("/").split("/") if s]
            if len(segments) != 4 or segments[0] != "stores":
                return None  # not a per-partition query
            parsed, _, got = _read_here(path, self.serdes,
                                        lambda query: answer_safely(query, directory))
            if parsed is None:
                return got, self.url
        if forwarded or self.router is None or not not_assigned(got):
            return got, self.url
        return None  # held elsewhere: a worker forwards it

    def authorized(self, path: str, authorization: str | None) -> bool:
        """Whether a request of ``path`` with this ``Authorization`` header may be answered:
        without a token every request; with one, the page's own files
        (:func:`millpond.query.page.is_public`: no data), or any other request that carries
        ``Bearer <token>`` (compared in constant time)."""
        if not self.token or is_public(unquote(urlsplit(path).path)):
            return True
        scheme, _, given = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode())

    def handle(self, path: str, forwarded: bool = False) -> tuple[Answer, str]:
        """The answer to a GET of ``path`` and the endpoint(s) that gave it; ``forwarded``
        (another process's request): answer from this process only."""
        parts = urlsplit(path)
        segments = [unquote(s) for s in parts.path.strip("/").split("/") if s]
        if len(segments) == 3 and segments[0] == "stores" and segments[2] in _OPS:
            return self._by_key(segments[1], segments[2], parts.query)
        return self._at_partition(path, forwarded)

    def _at_partition(self, path: str, forwarded: bool) -> tuple[Answer, str]:
        parsed, shape, got = _read_here(path, self.serdes, self.mailbox.ask)
        if parsed is None or forwarded or self.router is None or not not_assigned(got):
            return got, self.url
        return self._route(parsed, path, got, shape)

    def _key_partition(self, store: str, text: str) -> int:
        """The partition of ``store``'s key ``text`` by the job's partitioner (BadKey or
        ValueError: not a key of the store; LookupError: the partition count is not known)."""
        assert self.router is not None
        return self.router.partition(parse_key(self.serdes[store][0], text))

    def _route(self, query: Query, path: str, local: Answer,
               shape: Callable[[Answer], Answer]) -> tuple[Answer, str]:
        """Forward ``path`` to ``query``'s partition's owner; if the group's description was
        stale (the owner answers not assigned, or is gone), describe it again and try the
        new owner once. Never more than two forwards."""
        assert self.router is not None
        best, by = local, self.url
        tried: set[str] = set()
        for refresh in (False, True):
            try:
                owner = self.router.owners.owner(query.partition, refresh)
            except Exception as exc:  # noqa: BLE001 - Kafka away or denied: answer the 503
                log.info("describing the job's group for partition %d: %s",
                         query.partition, exc)
                break
            if owner is None or owner in tried:
                continue
            tried.add(owner)
            if owner == self.url:  # the group says it is ours now: ask the run loop again
                best, by = shape(self.mailbox.ask(query)), self.url
            else:
                best, by = self.router.forward(owner, path)
            if not not_assigned(best):
                return best, by
        return best, by

    def _each(self, paths: list[str]) -> list[tuple[Answer, str]]:
        """Each per-partition path's answer (routed), asked at once: the run loop answers
        this process's share in one iteration, and the forwards wait side by side."""
        if len(paths) == 1:
            return [self._at_partition(paths[0], forwarded=False)]
        with ThreadPoolExecutor(min(len(paths), FAN_OUT_THREADS),
                                thread_name_prefix="millpond-query-fan-out") as pool:
            return list(pool.map(lambda path: self._at_partition(path, False), paths))

    def _fan_out(self, store: str, op: str, query_string: str) -> tuple[Answer, str]:
        """A range or prefix without a partition: a page from every partition (wherever it
        is held), merged in key order under the request's limit, with one continuation
        token for all; the first answer that is not 200 instead (never a partial page)."""
        parsed = parse_request(f"/stores/{quote(store, safe='')}/0/{op}?{query_string}",
                               self.serdes)
        if isinstance(parsed, Answer):
            return parsed, self.url
        if self.router is None:
            return Answer(400, {"error": "this endpoint does not route: give the "
                                         "partition"}), self.url
        if self.router.partitions is None:
            return Answer(503, {"error": "the job is starting (its partition count is not "
                                         "known yet)"}), self.url
        pages: list[Answer] = []
        served: list[str] = []
        for got, by in self._each([
                f"/stores/{quote(store, safe='')}/{partition}/{op}?{query_string}&tokens=1"
                for partition in range(self.router.partitions)]):
            if got.status != 200:
                return got, by
            pages.append(got)
            served += [b for b in by.split(", ") if b not in served]
        entries, after = _merge(pages, parsed.limit)
        flag = {"committed": True} if parsed.committed else {}
        return Answer(200, {"store": store, **flag, "entries": entries, "next": after}), \
            ", ".join(served)

    def _by_key(self, store: str, op: str, query_string: str) -> tuple[Answer, str]:
        """A get or get-many without a partition: each key at its partition, wherever that
        partition is held; one answer, or the first that is not 200 (never a partial one)."""
        if op not in ("get", "get-many"):
            return self._fan_out(store, op, query_string)
        if store not in self.serdes:
            return Answer(404, {"error": f"unknown store {store!r}",
                                "stores": sorted(self.serdes)}), self.url
        params = parse_qs(query_string, keep_blank_values=True)
        texts = params.get("key", [])
        rest = [(k, v) for k, values in params.items() if k != "key" for v in values]
        if not texts or (op == "get" and len(texts) > 1):
            return Answer(400, {"error": f"{op} takes "
                                         f"{'one key' if op == 'get' else 'keys'} (?key=)"}), \
                self.url
        if len(texts) > MAX_KEYS:
            return Answer(400, {"error": f"at most {MAX_KEYS} keys per request"}), self.url
        if self.router is None:
            return Answer(400, {"error": "this endpoint does not route keys: give the "
                                         "partition"}), self.url
        by_partition: dict[int, list[str]] = {}
        try:
            for text in texts:
                by_partition.setdefault(self._key_partition(store, text), []).append(text)
        except (BadKey, ValueError) as exc:
            return Answer(400, {"error": str(exc)}), self.url
        except LookupError as exc:
            return Answer(503, {"error": str(exc)}), self.url
        entries: list[Any] = []
        missing: list[Any] = []
        served: list[str] = []
        for got, by in self._each([
                f"/stores/{quote(store, safe='')}/{partition}/{op}?"
                + urlencode([("key", k) for k in keys] + rest)
                for partition, keys in by_partition.items()]):
            if got.status != 200 or op == "get":
                return got, by
            entries += got.body["entries"]
            missing += got.body["missing"]
            flag = {"committed": True} if got.body.get("committed") else {}
            served += [b for b in by.split(", ") if b not in served]
        return Answer(200, {"store": store, **flag, "entries": entries, "missing": missing}), \
            ", ".join(served)


_OPS = ("get", "get-many", "range", "prefix")


def _merge(pages: list[Answer], limit: int) -> tuple[list[dict[str, Any]], str | None]:
    """The first ``limit`` entries of every partition's page in key order (partitions hold
    disjoint keys), and the token of the first key not returned: the smallest of the
    entries left over and of each page's own continuation."""
    entries = sorted((e for page in pages for e in page.body["entries"]),
                     key=lambda e: untoken(e["token"]))
    left = [untoken(e["token"]) for e in entries[limit:]]
    left += [untoken(page.body["next"]) for page in pages if page.body["next"] is not None]
    out = [{k: v for k, v in e.items() if k != "token"} for e in entries[:limit]]
    return out, token(min(left)) if left else None


def _plain_get(path: str) -> tuple[str, int | None, str] | None:
    """(store, partition or None, key text) of a get that asks one key and nothing else,
    ``/stores/<store>[/<p>]/get?key=K`` (as :func:`parse_request` reads it); None for any
    other request. The run loop answers most queries here: parsing costs it no more than
    splitting the path."""
    head, _, query = path.partition("?")
    if not query.startswith("key=") or "&" in query or "#" in query:
        return None
    segments = head.split("/")
    if len(segments) not in (4, 5) or segments[0] or segments[1] != "stores" \
            or segments[-1] != "get":
        return None
    partition = None
    if len(segments) == 5:
        if not segments[3].isdigit():
            return None
        partition = int(segments[3])
    return unquote(segments[2]), partition, unquote(query[4:].replace("+", " "))


def _same(answer: Answer) -> Answer:
    return answer


def _read_here(path: str, serdes: Serdes, read: Callable[[Query], Answer]
               ) -> tuple[Query | None, Callable[[Answer], Answer], Answer]:
    """The query of a per-partition ``path`` (None when it is refused), the shape of its
    answer (a one-key get's own), and that answer as ``read`` gives it here (through the
    mailbox on a worker, at once on the run loop's thread)."""
    parsed = parse_request(path, serdes)
    if isinstance(parsed, Answer):
        return None, _same, parsed
    shape = single if urlsplit(path).path.rstrip("/").endswith("/get") else _same
    return parsed, shape, shape(read(parsed))


def _response(answer_: Answer, served_by: str) -> bytes:
    """An answer as a JSON response naming the endpoint(s) that gave it."""
    try:
        body = orjson.dumps(answer_.body)
    except (TypeError, orjson.JSONEncodeError):  # e.g. an integer over 64 bits
        body = json.dumps(answer_.body, ensure_ascii=False).encode()
    return frame(answer_.status, "application/json", body, [(SERVED_BY, served_by)])


def _unauthorized() -> bytes:
    """401: the request lacks the endpoint's token (job.query.token)."""
    body = json.dumps({"error": "this endpoint needs its token (job.query.token): "
                                "Authorization: Bearer <token>"}).encode()
    return frame(401, "application/json", body, [("WWW-Authenticate", 'Bearer realm="millpond"')])

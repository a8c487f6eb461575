"""Handing queries from the endpoint's worker threads to the run loop's thread and the answers
back, and the run loop's hook that serves the endpoint's connections (:meth:`Mailbox.attach`).

The workers route requests and render answers; every read of a store happens
on the run loop's thread in :meth:`Mailbox.serve`, which the loop calls once per iteration
(between two batches: nothing is half processed, nothing is being committed, no task opens
or closes meanwhile). The loop pays one empty-deque check per iteration when nobody asks.
A query waits at most ``timeout_s`` for the loop (busy in a long commit, a rebalance or an
outage); then it is answered 503 and dropped if the loop comes to it later.

Queries cannot stall processing: one iteration answers at most ``max_queries`` of them and
stops taking more once it has spent ``budget_s`` on them (it always answers one, so a query
waits at most for those ahead of it); the rest wait for the next iteration, in order.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from millpond.query.reads import Answer, Directory, Query, answer_safely

DEFAULT_TIMEOUT_S = 5.0
MAX_QUERIES = 64  # queries answered per run loop iteration at most
BUDGET_S = 0.05  # time one iteration spends on queries before leaving the rest for the next


class _Pending:
    __slots__ = ("query", "done", "answer", "abandoned")

    def __init__(self, query: Query) -> None:
        self.query = query
        self.done = threading.Event()
        self.answer: Answer | None = None
        self.abandoned = False


class Mailbox:
    """Queries waiting for the run loop."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S, max_queries: int = MAX_QUERIES,
                 budget_s: float = BUDGET_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self.max_queries = max_queries
        self.budget_s = budget_s
        self._clock = clock
        self._queue: deque[_Pending] = deque()
        self._lock = threading.Lock()  # orders ask() against state changes
        self._state = "the job is starting (waiting for Kafka, checking its topics)"
        self._serving = False
        self._pump: Callable[[Directory, bool], None] | None = None
        self._served_at: float | None = None  # the run loop's last serve()

    # ---- the server's threads ---------------------------------------------------------
    def ask(self, query: Query) -> Answer:
        """The run loop's answer to ``query``, or a 503 saying why there is none."""
        pending = _Pending(query)
        with self._lock:
            if not self._serving:
                return Answer(503, {"error": self._state})
            self._queue.append(pending)
        if pending.done.wait(self.timeout_s) and pending.answer is not None:
            return pending.answer
        pending.abandoned = True
        return Answer(503, {"error": f"the job's run loop did not come to the query within "
                                     f"{self.timeout_s:g}s (committing, rebalancing or "
                                     "waiting for Kafka); try again"})

    def attach(self, pump: Callable[[Directory, bool], None]) -> None:
        """``pump(directory, busy)`` runs in each :meth:`serve`: the endpoint's connections
        served on the run loop's thread (:meth:`millpond.query.server.QueryServer.pump`)."""
        self._pump = pump

    def served_within(self, seconds: float) -> bool:
        """Whether the run loop served the mailbox in the last ``seconds``."""
        at = self._served_at
        return at is not None and self._serving and self._clock() - at < seconds

    # ---- the run loop's thread --------------------------------------------------------
    def open(self) -> None:
        """The run loop is running: queries are taken from now on."""
        with self._lock:
            self._serving = True

    @property
    def waiting(self) -> int:
        """How many queries wait for the run loop (abandoned ones included)."""
        return len(self._queue)

    def serve(self, directory: Directory, busy: bool = False) -> int:
        """Answer the waiting queries from ``directory``, oldest first, within this
        iteration's budget (``max_queries``, ``budget_s``), then the endpoint's connections
        (:meth:`attach`; ``busy``: the loop's last poll filled a batch, so the endpoint may
        let its requests linger); how many queries of the mailbox were answered."""
        self._served_at = self._clock()
        if self._pump is not None:
            self._pump(directory, busy)
        queue = self._queue
        if not queue:
            return 0
        n = 0
        until = self._clock() + self.budget_s
        while queue and n < self.max_queries and (n == 0 or self._clock() < until):
            pending = queue.popleft()
            if pending.abandoned:
                continue
            pending.answer = answer_safely(pending.query, directory)
            pending.done.set()
            n += 1
        return n

    def close(self, reason: str = "the job is stopping") -> None:
        """Refuse further queries with ``reason`` and answer the waiting ones so."""
        with self._lock:
            self._serving = False
            self._state = reason
        while self._queue:
            pending = self._queue.popleft()
            pending.answer = Answer(503, {"error": reason})
            pending.done.set()

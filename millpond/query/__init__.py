"""Live queries of a running job's stores over HTTP (``job.query.address``).

* :mod:`millpond.query.server`: the HTTP endpoint: queries of a partition held here answered
  on the run loop's thread, the rest (forwards, fan-outs, the page) on worker threads;
* :mod:`millpond.query.wire`: HTTP/1.1 connections (httptools) served by whichever thread
  pumps them, no thread per connection;
* :mod:`millpond.query.mailbox`: hands each query to the run loop's thread and its answer
  back;
* :mod:`millpond.query.reads`: answers a query from a task's stores (cache over engine),
  pages and continuation tokens, and the :class:`Directory` the runtime implements;
* :mod:`millpond.query.render`: request keys through the key serde, entries as JSON;
* :mod:`millpond.query.routing`: which process holds a partition (the endpoint record in
  each group member's client id) and forwarding a request there.

This package knows stores, serdes and config; the runtime (:mod:`millpond.tasks`) imports it,
never the other way.
"""

from typing import TYPE_CHECKING, Any

from millpond.query.errors import QueryError
from millpond.query.mailbox import Mailbox
from millpond.query.reads import Answer, Directory, Open, Query, StoreView, Unavailable

if TYPE_CHECKING:
    from millpond.query.server import QueryServer


def __getattr__(name: str) -> Any:
    """QueryServer on first use: the endpoint (httptools, the page, urllib for forwards) is
    imported only by a job that serves queries, not at every ``millpond run``'s start."""
    if name == "QueryServer":
        from millpond.query.server import QueryServer

        return QueryServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Answer", "Directory", "Mailbox", "Open", "Query", "QueryError", "QueryServer",
           "StoreView", "Unavailable"]

"""Live queries of a running job's stores over HTTP (``job.query.address``).

* :mod:`millpond.query.server`: the HTTP endpoint: queries of a partition held here answered
  on the run loop's thread, the rest (forwards, fan-outs, the page) on worker threads;
* :mod:`millpond.query.channel`: the job's side of the endpoint: requests from its front
  process read, and answers written, once per run loop turn;
* :mod:`millpond.query.front`: the front process: the endpoint's connections, kept out of the
  job process;
* :mod:`millpond.query.wire`: HTTP/1.1 connections (httptools) served by whichever thread
  pumps them, no thread per connection (the front's);
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

from importlib import import_module
from typing import TYPE_CHECKING, Any

from millpond.query.errors import QueryError

if TYPE_CHECKING:
    from millpond.query.mailbox import Mailbox
    from millpond.query.reads import Answer, Directory, Open, Query, StoreView, Unavailable
    from millpond.query.server import QueryServer

# Loaded on first use: the endpoint's front process (:mod:`millpond.query.front`) imports
# this package and needs none of them; the endpoint (httptools, the page, urllib for
# forwards) is imported only by a job that serves queries, not at every ``millpond run``.
_LAZY = {"Mailbox": "mailbox", "Answer": "reads", "Directory": "reads", "Open": "reads",
         "Query": "reads", "StoreView": "reads", "Unavailable": "reads", "QueryServer": "server"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"millpond.query.{module}"), name)


__all__ = ["Answer", "Directory", "Mailbox", "Open", "Query", "QueryError", "QueryServer",
           "StoreView", "Unavailable"]

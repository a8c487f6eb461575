"""Live queries of a running job's stores over HTTP (``job.query.address``).

* :mod:`millpond.query.server`: the HTTP endpoint (stdlib ``ThreadingHTTPServer``), which
  parses requests and renders answers on its own threads;
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

from millpond.query.errors import QueryError
from millpond.query.mailbox import Mailbox
from millpond.query.reads import Answer, Directory, Open, Query, StoreView, Unavailable
from millpond.query.server import QueryServer

__all__ = ["Answer", "Directory", "Mailbox", "Open", "Query", "QueryError", "QueryServer",
           "StoreView", "Unavailable"]

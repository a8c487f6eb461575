"""The streams API: keyed dataflows compiled onto millpond's tasks, stores and changelogs.

Declare an app, name it in the job's properties with ``app.class=<module>:<attribute>``, and
run it with ``millpond run`` like any job::

    from millpond.streams import App

    app = App()
    views = app.source("page-views")
    views.filter(lambda v: v["user_id"]).count("counts").to("user-counts")

Every stateful operator (``stateful_map``, ``count``, ``sum``, ``agg`` ...) is an ordinary
store named after it, with its changelog, restore, backups and Spark tools; every commit is
the task's Kafka transaction, so each guarantee means what it means for a StreamTask.
:class:`TestDriver` runs an app without Kafka.
"""

from millpond.streams import aggregations
from millpond.streams.aggregations import (
    Aggregation,
    collect,
    count,
    fold,
    maximum,
    mean,
    minimum,
    reduce,
    total,
)
from millpond.streams.dataflow import App, Stream
from millpond.streams.errors import DataflowError, OperatorError, StreamsError, TimerError
from millpond.streams.runtime import Context
from millpond.streams.testing import TestDriver
from millpond.streams.timers import Timer

__all__ = [
    "Aggregation",
    "App",
    "Context",
    "DataflowError",
    "OperatorError",
    "Stream",
    "StreamsError",
    "TestDriver",
    "Timer",
    "TimerError",
    "aggregations",
    "collect",
    "count",
    "fold",
    "maximum",
    "mean",
    "minimum",
    "reduce",
    "total",
]

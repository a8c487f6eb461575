"""Errors of the streams API: a dataflow that cannot be built or run, a user function that
raised."""

from __future__ import annotations

from millpond.errors import MillpondError


class StreamsError(MillpondError):
    """Base class of the streams API's errors."""


class DataflowError(StreamsError):
    """The dataflow is declared wrongly (a missing or repeated name, a stream without a
    sink, an ``app.class`` that is not a :class:`millpond.streams.App`)."""


class OperatorError(StreamsError):
    """A user function of an operator raised; the message names the operator. The run
    loop adds the topic, partition and offset of the message, and the job's error policy
    (stop, skip, dead-letter topic) applies as for a StreamTask."""

    def __init__(self, operator: str, exc: BaseException) -> None:
        super().__init__(f"operator {operator} raised {type(exc).__name__}: {exc}")
        self.operator = operator

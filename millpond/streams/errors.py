"""Errors of the streams API: a dataflow that cannot be built or run, a user function that
raised."""

from __future__ import annotations

from millpond.errors import USER_ERROR, MillpondError


class StreamsError(MillpondError):
    """Base class of the streams API's errors."""


class DataflowError(StreamsError):
    """The dataflow is declared wrongly: a missing or repeated name, a ``merge`` of another
    app's stream, or an ``app.class`` that cannot be imported, is not a
    ``millpond.streams.App`` or reads no topic."""

    exit_code = USER_ERROR


class OperatorError(StreamsError):
    """A user function of an operator raised; the message names the operator
    (``operator``). The run loop adds the topic, partition and offset of the message, and
    the job's error policy applies as for a StreamTask: the job stops, or with
    ``task.dlq.stream`` the message goes to the dead-letter topic."""

    def __init__(self, operator: str, exc: BaseException) -> None:
        super().__init__(f"operator {operator} raised {type(exc).__name__}: {exc}")
        self.operator = operator


class TimerError(OperatorError):
    """A ``process`` operator's ``on_timer`` raised. Not the fault of the record whose
    timestamp made the timer due, so it is never dead-lettered or skipped with it: the job
    stops (the timer is still set in the last commit, and fires again on restart)."""

    not_the_message = True  # the run loop's marker: stop, do not apply the error policy
    exit_code = USER_ERROR  # the user's code, as a task's window() raising

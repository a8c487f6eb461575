"""Errors of the task runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

from millpond.errors import USER_ERROR, MillpondError

if TYPE_CHECKING:
    from millpond.config import Config


class TaskError(MillpondError):
    """Base class for task runtime errors."""


class TaskConfigError(TaskError):
    """The job cannot start as configured (task.class, inputs, partitions)."""

    exit_code = USER_ERROR


class MessageError(TaskError):
    """A message could not be deserialized or processed; names where it is. A runtime
    failure (exit 1): the job stops on a record it meets while running."""

    def __init__(self, topic: str, partition: int, offset: int, cause: BaseException, stage: str):
        self.topic, self.partition, self.offset, self.cause, self.stage = (
            topic, partition, offset, cause, stage)
        super().__init__(
            f"{stage} failed for {topic}[{partition}] at offset {offset}: "
            f"{type(cause).__name__}: {cause}. Nothing after offset {offset - 1} was committed; "
            + ("fix the data or the serde, or set task.drop.deserialization.errors=true (skip "
               "such messages) or task.dlq.stream (send them to a dead-letter topic)."
               if stage == "deserialization" else
               "fix the code, or set task.dlq.stream to send such messages to a dead-letter "
               "topic and go on.")
        )


class UserCodeError(TaskError):
    """A method of the job's task class (``init``, ``window``, ``close``) raised: names the
    class, the method, the exception and the user's own frame where it was raised."""

    exit_code = USER_ERROR

    def __init__(self, task: object, method: str, cause: BaseException) -> None:
        cls = type(task)
        self.cause = cause
        where = user_frame(cause)
        super().__init__(
            f"{cls.__module__}.{cls.__qualname__}.{method}() raised "
            f"{type(cause).__name__}: {cause}" + (f" (at {where})" if where else "")
            + "; fix the task's code (nothing after the last commit was committed)")


class StateDirError(TaskError):
    """A task's state directory cannot be made or written (read-only, not a directory, no
    permission): names the path, the reason and where job.logged.store.base.dir is set."""

    exit_code = USER_ERROR

    def __init__(self, config: Config, partition: int, cause: OSError) -> None:
        key = "job.logged.store.base.dir"
        super().__init__(
            f"cannot use {cause.filename}: {cause.strerror or cause}; task partition-"
            f"{partition} keeps its stores under {key}={config.job.logged_store_base_dir} "
            f"({config.location(key)}), which must be a directory this user can write")


def user_frame(exc: BaseException) -> str | None:
    """``file:line in function`` of the innermost traceback frame outside millpond and the
    installed libraries (the user's own code), or None when there is none."""
    import sys
    import sysconfig
    import traceback
    from pathlib import Path

    library = {str(Path(__file__).parents[1])}
    library |= {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    library |= {sys.prefix, sys.base_prefix} - {""}
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if not any(frame.filename.startswith(root + "/") or frame.filename == root
                   for root in library):
            found = frame
    if found is None:
        return None
    return f"{found.filename}:{found.lineno} in {found.name}"

"""Exit codes: 2 for a config or user error, 1 for a runtime failure (docs/reference/cli.md).

Each error class says which it is (``exit_code``); the CLI's boundary exits with it. The
commands here are real click commands behind the real boundary, raising real errors.
"""

from __future__ import annotations

import errno
import importlib
import pkgutil

import click
import pytest
from click.testing import CliRunner

import millpond
import millpond.config.errors
import millpond.kafka.errors
from millpond.clibase import BoundaryGroup
from millpond.errors import RUNTIME_FAILURE, USER_ERROR, MillpondError


def _all_error_classes() -> list[type[MillpondError]]:
    for info in pkgutil.walk_packages(millpond.__path__, "millpond."):
        if info.name.endswith(".errors"):
            importlib.import_module(info.name)
    found: list[type[MillpondError]] = []
    todo: list[type[MillpondError]] = [MillpondError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_class_is_a_user_error_or_a_runtime_failure() -> None:
    classes = _all_error_classes()
    assert len(classes) > 40
    for cls in classes:
        assert cls.exit_code in (USER_ERROR, RUNTIME_FAILURE), cls


@pytest.mark.parametrize("path, code", [
    # config or user errors: the operator's to fix
    ("millpond.config.errors.ConfigError", 2),
    ("millpond.metrics.errors.MetricsConfigError", 2),
    ("millpond.tasks.errors.TaskConfigError", 2),
    ("millpond.tasks.errors.UserCodeError", 2),
    ("millpond.tasks.errors.StateDirError", 2),
    ("millpond.streams.errors.DataflowError", 2),
    ("millpond.streams.errors.TimerError", 2),
    ("millpond.changelog.errors.StoreLockedError", 2),
    ("millpond.changelog.errors.CheckpointRefusedError", 2),
    ("millpond.changelog.errors.ChangelogRefusedError", 2),
    ("millpond.kafka.errors.TopicError", 2),
    ("millpond.kafka.errors.AuthenticationError", 2),
    ("millpond.kafka.errors.TlsCertificateError", 2),
    ("millpond.serdes.errors.SerdeConfigError", 2),
    ("millpond.stores.errors.StoreConfigError", 2),
    ("millpond.sideinputs.errors.SideInputsConfigError", 2),
    ("millpond.ops.errors.JobNeverRanError", 2),
    ("millpond.backup.errors.BackupConfigError", 2),
    ("millpond.dev.errors.ToolMissingError", 2),
    ("millpond.dev.errors.PortInUseError", 2),
    ("millpond.spark.errors.RescaleError", 2),
    ("millpond.spark.errors.SourceConfigError", 2),
    # runtime failures
    ("millpond.errors.MillpondError", 1),
    ("millpond.kafka.errors.BrokerUnreachableError", 1),
    ("millpond.kafka.errors.DeliveryError", 1),
    ("millpond.kafka.errors.ProducerFencedError", 1),
    ("millpond.kafka.errors.AuthorizationError", 1),
    ("millpond.kafka.errors.TopicUnavailableError", 1),
    ("millpond.kafka.errors.OutputTopicError", 1),
    ("millpond.ops.errors.CheckFailedError", 1),
    ("millpond.ops.errors.TopicCreateError", 1),
    ("millpond.tasks.errors.MessageError", 1),
    ("millpond.tasks.input_reset.InputGapError", 1),
    ("millpond.streams.errors.OperatorError", 1),
    ("millpond.changelog.errors.CheckpointError", 1),
    ("millpond.changelog.errors.ChangelogLostError", 1),
    ("millpond.changelog.errors.BadChangelogRecordError", 1),
    ("millpond.serdes.errors.SerdeError", 1),
    ("millpond.stores.errors.StoreError", 1),
    ("millpond.backup.errors.BackupUnavailableError", 1),
    ("millpond.backup.errors.SnapshotCorruptError", 1),
    ("millpond.spark.errors.SourceError", 1),
    ("millpond.spark.errors.SparkMemoryError", 1),
    ("millpond.spark.decode.DecodeError", 1),
    ("millpond.dev.errors.BrokerStartError", 1),
])
def test_the_classes_exit_codes(path: str, code: int) -> None:
    module, _, name = path.rpartition(".")
    assert getattr(importlib.import_module(module), name).exit_code == code


def _cli(exc: BaseException) -> click.Group:
    @click.group(cls=BoundaryGroup)
    def cli() -> None:
        pass

    @cli.command()
    def fail() -> None:
        raise exc

    @cli.command()
    @click.option("--n", type=click.IntRange(min=1), required=True)
    def usage(n: int) -> None:
        pass

    return cli


@pytest.mark.parametrize("exc, code, line", [
    (millpond.config.errors.ConfigError("must be > 0", key="task.commit.ms", file="j.properties",
                                        line=3), 2, "Error: j.properties:3: task.commit.ms: "
                                                    "must be > 0"),
    (millpond.kafka.errors.BrokerUnreachableError("no broker at 127.0.0.1:1 answered"), 1,
     "Error: Kafka broker unreachable: no broker at 127.0.0.1:1 answered"),
    (OSError(errno.EROFS, "Read-only file system", "/state"), 2,
     "Error: cannot use /state: Read-only file system"),
    (OSError(errno.ENOSPC, "No space left on device", "/state/x.sst"), 1,
     "Error: cannot use /state/x.sst: No space left on device"),
])
def test_the_boundary_exits_with_the_errors_code(exc: BaseException, code: int,
                                                  line: str) -> None:
    done = CliRunner().invoke(_cli(exc), ["fail"])
    assert (done.exit_code, done.output.strip()) == (code, line)


def test_click_usage_errors_stay_2() -> None:
    done = CliRunner().invoke(_cli(ValueError()), ["usage", "--n", "0"])
    assert done.exit_code == 2 and "--n" in done.output


def test_an_unexpected_exception_keeps_its_traceback_and_exits_1() -> None:
    done = CliRunner().invoke(_cli(ValueError("a bug")), ["fail"])
    assert done.exit_code == 1 and isinstance(done.exception, ValueError)

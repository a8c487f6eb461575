"""What every millpond command group shares: the one error boundary and the job options.

The boundary: a :class:`~millpond.errors.MillpondError` (bad config, input, user code, state
or environment) is printed as one line, ``Error: <what and where>``, with the exit code its
class gives (``exit_code``): 2 for a config or user error, 1 for a runtime failure. An
``OSError`` on a named file or directory is one line too: exit 2 (a read-only or missing
state directory, a path the operator gave), or 1 when the disk is full or fails. The full
traceback goes to the ``millpond.cli`` logger at DEBUG (``run --log-level DEBUG``) and, with
``millpond --verbose``, to stderr. click's own usage errors exit 2. Any other exception is
an unexpected failure or a bug: it keeps its traceback and exits 1, the code also left to
results a command reports (a failed audit or verify, a dev server that is not running).
"""

from __future__ import annotations

import errno
import logging
import traceback
from pathlib import Path
from typing import Any

import click

from millpond.errors import RUNTIME_FAILURE, USER_ERROR, MillpondError

# An OSError on a named path with one of these is the machine failing, not a path to fix.
DEVICE_FAILURES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})
VERBOSE = "millpond.verbose"  # ctx.meta key: --verbose was given
log = logging.getLogger("millpond.cli")


class MillpondFailure(click.ClickException):
    """A config or user error as the CLI shows it: one line, exit code 2."""

    exit_code = USER_ERROR


class RuntimeFailure(MillpondFailure):
    """A runtime failure as the CLI shows it: one line, exit code 1."""

    exit_code = RUNTIME_FAILURE


class BoundaryGroup(click.Group):
    """A command group whose commands' ``MillpondError`` become :class:`MillpondFailure`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MillpondError as exc:
            raise _one_line(ctx, exc, str(exc), exc.exit_code) from exc
        except OSError as exc:
            if exc.filename is None:
                raise  # not about a file: a runtime failure, with its traceback
            code = RUNTIME_FAILURE if exc.errno in DEVICE_FAILURES else USER_ERROR
            raise _one_line(ctx, exc, _os_error(exc), code) from exc


def _one_line(ctx: click.Context, exc: BaseException, message: str,
              exit_code: int) -> MillpondFailure:
    """The failure to print; the traceback is logged at DEBUG, and printed with --verbose."""
    log.debug("%s", message, exc_info=exc)
    if ctx.meta.get(VERBOSE):
        click.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)
    return (RuntimeFailure if exit_code == RUNTIME_FAILURE else MillpondFailure)(message)


def _os_error(exc: OSError) -> str:
    """``cannot use <path>: <reason>``."""
    target = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
    return f"cannot use {target}: {exc.strerror or exc}"


config_option = click.option(
    "--config", "config_path", required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The job's .properties file.",
)
override_option = click.option(
    "--config-override", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Override one config key (repeatable).",
)

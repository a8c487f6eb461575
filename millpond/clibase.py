"""What every millpond command group shares: the one error boundary and the job options.

The boundary: a :class:`~millpond.errors.MillpondError` (bad config, input, user code, state
or environment) is printed as one line, ``Error: <what and where>``, with exit code 2; so is
an ``OSError`` on a named file or directory (a read-only or missing state directory). The
full traceback goes to the ``millpond.cli`` logger at DEBUG (``run --log-level DEBUG``) and,
with ``millpond --verbose``, to stderr. Any other exception is a runtime failure or a bug: it
keeps its traceback and exits 1, the code also left to results a command reports (a failed
audit or verify, a dev server that is not running).
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import click

from millpond.errors import MillpondError

ERROR_EXIT = 2
VERBOSE = "millpond.verbose"  # ctx.meta key: --verbose was given
log = logging.getLogger("millpond.cli")


class MillpondFailure(click.ClickException):
    """A :class:`MillpondError` as the CLI shows it: one line, exit code 2."""

    exit_code = ERROR_EXIT


class BoundaryGroup(click.Group):
    """A command group whose commands' ``MillpondError`` become :class:`MillpondFailure`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MillpondError as exc:
            raise _one_line(ctx, exc, str(exc)) from exc
        except OSError as exc:
            if exc.filename is None:
                raise  # not about a file: a runtime failure, with its traceback
            raise _one_line(ctx, exc, _os_error(exc)) from exc


def _one_line(ctx: click.Context, exc: BaseException, message: str) -> MillpondFailure:
    """The failure to print; the traceback is logged at DEBUG, and printed with --verbose."""
    log.debug("%s", message, exc_info=exc)
    if ctx.meta.get(VERBOSE):
        click.echo("".join(traceback.format_exception(exc)).rstrip(), err=True)
    return MillpondFailure(message)


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

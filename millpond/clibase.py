"""What every millpond command group shares: the one error boundary and the job options.

The boundary: a :class:`~millpond.errors.MillpondError` (bad config, input, state or
environment) is printed as one line, ``Error: <what and where>``, with exit code 2; any other
exception is a bug and keeps its traceback. Exit code 1 is left to results a command reports
(a failed audit or verify, a dev server that is not running).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from millpond.errors import MillpondError

ERROR_EXIT = 2


class MillpondFailure(click.ClickException):
    """A :class:`MillpondError` as the CLI shows it: one line, exit code 2."""

    exit_code = ERROR_EXIT


class BoundaryGroup(click.Group):
    """A command group whose commands' ``MillpondError`` become :class:`MillpondFailure`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MillpondError as exc:
            raise MillpondFailure(str(exc)) from exc


config_option = click.option(
    "--config", "config_path", required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The job's .properties file.",
)
override_option = click.option(
    "--config-override", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Override one config key (repeatable).",
)

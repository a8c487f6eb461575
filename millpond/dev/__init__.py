"""millpond.dev: real servers provisioned locally for development, tests and the demo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


class DevServer(Protocol):
    """What ``millpond dev <server> start|stop|status`` drives (LocalKafka, LocalS3,
    LocalSparkCluster)."""

    def start(self, timeout: float, echo: Callable[[str], None]) -> str:
        """Start (or reuse a running one); the address clients use."""
        ...

    def stop(self) -> bool:
        """Stop it; True if it ran."""
        ...

    def status_line(self) -> tuple[bool, str]:
        """Whether it runs, and one line saying where."""
        ...


@runtime_checkable
class SecuredServer(Protocol):
    """A dev server whose clients need settings besides its address (the secured broker)."""

    def connection_help(self) -> str:
        """The client settings, as lines to paste into a job's properties (secrets left in
        the files the lines name)."""
        ...

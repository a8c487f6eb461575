"""Task classes whose own code fails, for the one-line errors of user code (tests/cli)."""

from __future__ import annotations

from millpond import StreamTask
from tests.jobs.counting import Counter


def check_setting(value: object) -> None:
    raise ValueError(f"bad setting {value!r}")


class InitRaises(StreamTask):
    def init(self, context):  # type: ignore[no-untyped-def]
        check_setting(context.config.get("job.name"))  # the user's frame: check_setting

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        pass


class WrongStore(StreamTask):
    def init(self, context):  # type: ignore[no-untyped-def]
        self.counts = context.get_store("countz")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        pass


class WindowRaises(Counter):
    def window(self, collector, coordinator):  # type: ignore[no-untyped-def]
        raise RuntimeError("window went wrong")


class CloseRaises(Counter):
    def close(self):  # type: ignore[no-untyped-def]
        raise OSError("close went wrong")

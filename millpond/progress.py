"""Progress of a long operation (a restore, a Spark job) for the person running it.

On a terminal it is a tqdm bar, redrawn in place; anywhere else (a pipe, a log file, CI) it is
plain lines, one every ``every_s`` seconds and one at the end. Either way every line says what
it counts: ``restore hourly-counts p3: 120,000/~400,000 records``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

PLAIN_EVERY_S = 5.0
BAR = "{desc}: {percentage:3.0f}%|{bar}| {n:,}/{total:,}{unit} [{elapsed}<{remaining}, {rate_fmt}]"
EMPTY_BAR = "{desc}: {n:,}/{total:,}{unit}"  # nothing was to do: no 0% bar


class Progress:
    """``done`` of ``total`` ``unit`` of the operation ``label``.

    ``total`` may be an estimate (``approximate``: shown as ``~400,000``) and may change
    (:meth:`update`); :meth:`finish` makes it the final count. ``tty`` forces the terminal
    (bar) or plain-lines form; by default it is the stream's ``isatty()``.
    """

    def __init__(self, label: str, total: int, unit: str, *, stream: IO[str] | None = None,
                 tty: bool | None = None, approximate: bool = False,
                 every_s: float = PLAIN_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.total = max(0, total)
        self.unit = unit
        self.approximate = approximate
        self.stream: IO[str] = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.every_s = every_s
        self.clock = clock
        self.done = 0
        self.began = self.last_line = clock()
        self.closed = False
        self.bar: Any = None
        if self.tty:
            from tqdm import tqdm

            # Counts in full (1,500/1,500 records), only the rate scaled (77.7M records/s).
            # A terminal that tells no size (a fresh pseudo-terminal) is taken as 80x24: tqdm
            # would draw a bar 0 columns wide, or hide it below row 0.
            columns, lines = _size(self.stream)
            self.bar = tqdm(total=self.total, desc=label, unit=f" {unit}", file=self.stream,
                            leave=True, dynamic_ncols=bool(columns), ncols=columns or 80,
                            nrows=lines or 24, mininterval=0.2, unit_scale=True,
                            bar_format=BAR)

    def line(self) -> str:
        """The plain line for where it stands now."""
        total = f"~{self.total:,}" if self.approximate else f"{self.total:,}"
        return f"{self.label}: {self.done:,}/{total} {self.unit}"

    def update(self, done: int, total: int | None = None) -> None:
        """``done`` so far (absolute, not an increment); ``total`` if it changed."""
        if total is not None:
            self.total = max(0, total)
        self.done = done
        if self.bar is not None:
            if total is not None:
                self.bar.total = self.total
            self.bar.update(done - self.bar.n)
            return
        now = self.clock()
        if now - self.last_line >= self.every_s:
            self.last_line = now
            self._print(self.line())

    def finish(self, done: int | None = None, note: str = "") -> None:
        """The operation ended: ``done`` is also the total now. ``note`` is appended to the
        plain line (``done in 1.20 s`` when not given)."""
        if self.closed:
            return
        self.closed = True
        if done is not None:
            self.done = done
        self.total, self.approximate = self.done, False
        if self.bar is not None:
            self.bar.total = self.bar.n = self.done
            if not self.done:
                self.bar.bar_format = EMPTY_BAR
            self.bar.refresh()
            self.bar.close()
            return
        self._print(f"{self.line()}, {note or f'done in {self.clock() - self.began:.2f} s'}")

    def close(self) -> None:
        """Stop drawing without claiming the operation finished (on an error)."""
        if not self.closed:
            self.closed = True
            if self.bar is not None:
                self.bar.close()

    def _print(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class RestoreProgress:
    """A restore listener (``millpond.changelog.restore.RestoreListener``) showing each store
    partition's restore as ``restore <store> p<partition>: <done>/~<total> records``.

    The total is the partition's offset range, an upper bound (compaction gaps and transaction
    markers take offsets but hold no record): the end line gives the records restored."""

    def __init__(self, stream: IO[str] | None = None, tty: bool | None = None,
                 every_s: float = PLAIN_EVERY_S) -> None:
        self.stream, self.tty, self.every_s = stream, tty, every_s
        self.progress: Progress | None = None

    def on_restore_start(self, stats: Any) -> None:
        if self.progress is not None:
            self.progress.close()
        self.progress = Progress(f"restore {stats.store} p{stats.partition}",
                                 stats.end_offset - stats.start_offset, "records",
                                 stream=self.stream, tty=self.tty, approximate=True,
                                 every_s=self.every_s)

    def on_batch_restored(self, stats: Any) -> None:
        if self.progress is not None:
            self.progress.update(stats.records)

    def on_restore_end(self, stats: Any) -> None:
        if self.progress is not None:
            self.progress.finish(stats.records, note=f"done in {stats.seconds:.2f} s")
            self.progress = None


def _size(stream: IO[str]) -> tuple[int, int]:
    """The terminal's (columns, lines), zeros where it tells none."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return 0, 0
    return size.columns, size.lines

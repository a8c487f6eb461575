"""Progress of restores (and Spark jobs): plain labelled lines off a terminal, a tqdm bar on
one; every line says what it counts."""

from __future__ import annotations

import io
import os
import pty
import re
import select

from millpond.changelog.restore import RestoreStats
from millpond.progress import Progress, RestoreProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def restore_run(listener: RestoreProgress, records: list[int], seconds: float = 2.31) -> None:
    """A restore of ``page-views-counts`` partition 3 (offsets 0..400,000) reporting after
    each of ``records`` (cumulative counts)."""
    stats = RestoreStats("page-views-counts", "views-changelog", 3, 0, 400_000)
    listener.on_restore_start(stats)
    for n in records:
        stats.records = n
        listener.on_batch_restored(stats)
    stats.seconds = seconds
    listener.on_restore_end(stats)


def test_restore_lines_off_a_terminal_name_store_partition_and_done_of_total() -> None:
    out = io.StringIO()  # not a terminal
    restore_run(RestoreProgress(stream=out, every_s=0), [120_000, 395_000])
    assert out.getvalue().splitlines() == [
        "restore page-views-counts p3: 120,000/~400,000 records",
        "restore page-views-counts p3: 395,000/~400,000 records",
        # at the end the total is exact: compaction gaps and markers held no record
        "restore page-views-counts p3: 395,000/395,000 records, done in 2.31 s",
    ]
    assert "\r" not in out.getvalue() and "|" not in out.getvalue()


def test_plain_lines_come_at_most_every_few_seconds() -> None:
    out, clock = io.StringIO(), Clock()
    p = Progress("spark audit counts", 40, "tasks", stream=out, tty=False, every_s=5.0,
                 clock=clock)
    for done, at in ((3, 101.0), (9, 104.0), (20, 105.5), (21, 106.0), (30, 111.0)):
        clock.now = at
        p.update(done)
    clock.now = 112.5
    p.finish(40)
    assert out.getvalue().splitlines() == [
        "spark audit counts: 20/40 tasks",  # 5.5 s after the start
        "spark audit counts: 30/40 tasks",  # 5.5 s after the previous line
        "spark audit counts: 40/40 tasks, done in 12.50 s",
    ]


def test_a_short_restore_off_a_terminal_is_one_line() -> None:
    out = io.StringIO()
    restore_run(RestoreProgress(stream=out), [193], seconds=0.06)
    assert out.getvalue() == "restore page-views-counts p3: 193/193 records, done in 0.06 s\n"


def test_on_a_terminal_it_is_a_progress_bar_drawn_to_the_end() -> None:
    out = io.StringIO()
    restore_run(RestoreProgress(stream=out, tty=True), [120_000, 395_000])
    drawn = out.getvalue()
    assert "\r" in drawn  # redrawn in place
    assert re.search(r"restore page-views-counts p3: 100%\|[█#]+\| 395,000/395,000 records \[", drawn), drawn
    assert "done in" not in drawn and "~" not in drawn  # no plain lines


def test_the_terminal_form_is_chosen_by_the_stream() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert Progress("x", 1, "records", stream=Terminal()).bar is not None
    assert Progress("x", 1, "records", stream=io.StringIO()).bar is None


def test_on_a_terminal_nothing_to_do_is_not_a_0_percent_bar() -> None:
    out = io.StringIO()
    restore_run(RestoreProgress(stream=out, tty=True), [], seconds=0.0)
    last = out.getvalue().rsplit("\r", 1)[-1]
    assert last.strip() == "restore page-views-counts p3: 0/0 records", out.getvalue()


def test_a_terminal_that_tells_no_size_still_gets_a_bar() -> None:
    """A fresh pseudo-terminal is 0x0: tqdm would draw the bar 0 columns wide, or hide it as
    below the screen's last row."""
    master, slave = pty.openpty()
    try:
        with os.fdopen(os.dup(slave), "w", encoding="utf-8") as terminal:
            p = Progress("restore counts p0", 100, "records", stream=terminal)
            assert p.bar is not None
            p.update(50)
            p.finish(100)
        drawn = b""
        while select.select([master], [], [], 0.5)[0]:
            drawn += os.read(master, 65536)
    finally:
        os.close(slave)
        os.close(master)
    assert re.search(r"restore counts p0: 100%\|█+\| 100/100 records", drawn.decode()), drawn

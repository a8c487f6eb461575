"""The process's memory against its budget (job.container.memory.mb): RSS for the status
line, and one warning naming the top consumers when RSS passes WARN_AT of the budget.

RSS is read from ``/proc/self/statm`` (Linux); elsewhere the peak from ``getrusage``.
"""

from __future__ import annotations

import logging
import os
import resource
import sys

from millpond.config.memory import MemoryPlan
from millpond.stores.cached import cache_budget
from millpond.stores.engines.rocksdb_options import process_memory
from millpond.stores.malloc import release_free_memory

log = logging.getLogger(__name__)

WARN_AT = 0.9  # of the budget
MiB = 1024 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size now (its peak where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def consumers() -> list[tuple[str, int]]:
    """What holds memory now, largest first: the shared block cache (memtables included),
    its memtables, and each store's object caches."""
    parts: list[tuple[str, int]] = []
    shared = process_memory()
    if shared is not None:
        cache, memtables = shared.usage()
        parts.append(("rocksdb block cache (memtables included)", cache))
        parts.append(("rocksdb memtables", memtables))
    budget = cache_budget()
    if budget is not None:
        parts.extend((f"object cache of store {name}", used)
                     for name, used in budget.by_store().items())
    return sorted(parts, key=lambda part: part[1], reverse=True)


class MemoryWatch:
    """RSS against the plan's budget; warns once when it passes WARN_AT of it."""

    def __init__(self, plan: MemoryPlan) -> None:
        self.plan = plan
        self.warned = False

    def started(self) -> None:
        """Log the plan (the run loop's start)."""
        log.info("%s", self.plan.summary())

    def status(self) -> str:
        """``rss X MiB of Y MiB, peak Z MiB`` for the status line; warns once when RSS
        passes WARN_AT of the budget.

        Reads RSS, then gives the heap's freed memory back to the OS (millpond.stores.malloc:
        glibc keeps what a restore, a write-down or a rebalance freed, and the caches that
        fill next come on top of it; a few ms every status interval). The line shows what
        the process held before the trim, what a container counts: read after it, a session
        job's lines said 126-135 MiB while it sat at 145-157 MiB between them. The peak is
        the kernel's high-water mark (VmHWM)."""
        rss = rss_bytes()
        release_free_memory()
        budget = self.plan.budget
        if rss > WARN_AT * budget and not self.warned:
            self.warned = True
            top = ", ".join(f"{name} {used / MiB:,.1f} MiB" for name, used in consumers()[:5])
            log.warning(
                "memory: RSS %.1f MiB is over %.0f%% of the budget %.1f MiB (%s); top "
                "consumers: %s. Raise job.container.memory.mb or lower the per-store keys "
                "(`millpond status --explain-memory` prints the plan)",
                rss / MiB, WARN_AT * 100, budget / MiB, self.plan.source, top or "none measured")
        peak = max(rss, peak_rss_bytes())
        return f"rss {rss / MiB:,.0f} MiB of {budget / MiB:,.0f} MiB, peak {peak / MiB:,.0f} MiB"

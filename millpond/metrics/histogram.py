"""A plain-Python duration histogram the runtime updates (one per task, once per commit).

No locks and no exporter types: the runtime adds to ints and floats, a reporter reads them at
scrape time (ints and floats are replaced atomically under the GIL, so a scrape sees a
slightly stale but never torn value).
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds (seconds, inclusive, as Prometheus' ``le``) of the commit-latency buckets: a
# commit is a transaction round trip plus a flush, so milliseconds to tens of seconds.
COMMIT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class DurationHistogram:
    """Counts of observed durations per bucket (the last one is +Inf), their sum and count."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...] = COMMIT_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        """Add one duration."""
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def merge(self, other: DurationHistogram) -> None:
        """Add ``other``'s observations (same bounds) to this one."""
        for i, n in enumerate(other.counts):
            self.counts[i] += n
        self.sum += other.sum
        self.count += other.count

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``, Prometheus' bucket form."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), list(self.counts), strict=True):
            total += n
            out.append((bound, total))
        return out

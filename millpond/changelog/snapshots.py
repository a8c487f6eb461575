"""What recovery needs from a store of remote snapshots (e.g. :mod:`millpond.backup`).

Recovery only lists a store partition's snapshots and fetches one into a directory; this
small interface keeps :mod:`millpond.changelog.recovery` testable without an object store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class SnapshotRef:
    """One complete remote snapshot of a store partition (its manifest was written)."""

    id: str
    store: str
    topic: str  # the changelog the snapshot's offset is in
    partition: int
    offset: int  # the last changelog offset the snapshot reflects (-1 if none)
    bytes: int = 0  # total size of its files
    created_ms: int = 0


class RemoteSnapshots(Protocol):
    """Snapshots of one job's store partitions, newest first; fetches verify what they get."""

    def snapshots(self, store: str, partition: int) -> list[SnapshotRef]:
        """Complete snapshots of ``store``'s ``partition``, newest (highest offset) first.

        Raises ``OSError`` (or a subclass) when the remote cannot be reached."""
        ...

    def fetch(self, ref: SnapshotRef, dest: Path) -> int:
        """Download ``ref`` into the new directory ``dest``, verifying every file's size and
        checksum; return the bytes downloaded. A bad snapshot raises an exception and
        leaves no ``dest``."""
        ...

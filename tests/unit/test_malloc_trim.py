"""millpond.stores.malloc: what a restore freed goes back to the OS (glibc's malloc_trim)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from millpond.stores.malloc import release_free_memory

MiB = 1024 * 1024


def anon_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not Path("/proc/self/status").exists(),
                    reason="glibc's malloc_trim and /proc are Linux's")
def test_freed_small_allocations_go_back_to_the_os() -> None:
    # ~150 MiB of 2 KB objects (malloc'd, not Python's small-object arenas), one in 64 kept:
    # what is freed sits between live chunks, where free() alone never returns it.
    blocks = [bytes(2000) + i.to_bytes(4, "little") for i in range(75_000)]
    kept = blocks[::64]
    del blocks
    before = anon_bytes()
    if not release_free_memory():
        pytest.skip("no malloc_trim in this C library (not glibc)")
    after = anon_bytes()
    assert before - after >= 80 * MiB, (before / MiB, after / MiB)
    assert len(kept) == 1172

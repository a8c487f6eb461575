"""Give freed heap memory back to the operating system (glibc's ``malloc_trim``).

A restore allocates and frees hundreds of MiB in small pieces (record batches, memtables,
SST building buffers). glibc keeps what was freed in its heaps, so the process's RSS stays
where the restore left it, and what the job allocates next (block cache, object caches)
comes on top: under a 384 MB cap a run that restored 1.6M x 1 KB records first went to
405 MiB RSS while the same updates on a store that needed no restore took 184 MiB.
``malloc_trim(0)`` after a restore gave back 100-150 MiB of 160-210 MiB in one test.
Elsewhere (not glibc, not Linux) it does nothing. ctypes is imported at the first call (a
restore's end), not at start-up.
"""

from __future__ import annotations

import sys
from typing import Any

_trim: Any = None  # libc's malloc_trim once found; False where there is none


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; True if glibc's ``malloc_trim`` ran."""
    global _trim
    if _trim is None:
        _trim = False
        if sys.platform.startswith("linux"):
            import ctypes
            import ctypes.util

            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _trim = libc.malloc_trim
                _trim.argtypes = [ctypes.c_size_t]
                _trim.restype = ctypes.c_int
            except (OSError, AttributeError):  # musl and others: no malloc_trim
                _trim = False
    if _trim is False:
        return False
    _trim(0)
    return True

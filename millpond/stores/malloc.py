"""glibc malloc's two settings that matter to a job: freed memory back to the OS
(``malloc_trim``) and one arena per thread (``M_ARENA_MAX``).

A restore allocates and frees hundreds of MiB in small pieces (record batches, memtables,
SST building buffers). glibc keeps what was freed in its heaps, so the process's RSS stays
where the restore left it, and what the job allocates next (block cache, object caches)
comes on top: under a 384 MB cap a run that restored 1.6M x 1 KB records first went to
405 MiB RSS while the same updates on a store that needed no restore took 184 MiB.
``malloc_trim(0)`` after a restore gave back 100-150 MiB of 160-210 MiB in one test.
Elsewhere (not glibc, not Linux) it does nothing. ctypes is imported at the first call of
either (~2 ms, at start-up: ``private_arenas``).

glibc gives a process at most 8 arenas a core (16 on 2 cores); the thread after that shares
one, starting with the main thread's. A job has ~35 threads with 4 tasks (each librdkafka
client runs one a broker plus its own), so which thread lands on the run loop's arena depends
on the order they start. When it is the input consumer's fetcher, the loop and the fetcher
take the same lock for every record (the fetcher allocates one op a message, the loop frees
it): its voluntary context switches go from ~2k to 30-45k a run, the loop's futex calls 4-6x,
and the job runs 16-22% slower (benchmarks/results.md, 2026-12-07 16:56 and 18:58).
``private_arenas()`` lifts the limit before the clients start, so every thread gets an arena
of its own; an arena is only reserved address space until a thread uses it.
"""

from __future__ import annotations

import sys
from typing import Any

_glibc: Any = None  # the process's C library once found, when it is glibc; False when not

M_ARENA_MAX = -8  # mallopt's parameter number in glibc's malloc.h
ARENAS = 1024  # more than the threads of a process with ~150 tasks on a 3-broker cluster


def _libc() -> Any:
    """The process's glibc through ctypes (looked up once), or None (not Linux, not glibc:
    musl has no ``malloc_trim`` and a ``mallopt`` stub that ignores its settings)."""
    global _glibc
    if _glibc is None:
        _glibc = False
        if sys.platform.startswith("linux"):
            import ctypes  # ~2 ms; not ctypes.util.find_library, which runs ldconfig (~15 ms)

            try:
                libc = ctypes.CDLL(None)  # the interpreter's own symbols, libc's among them
                libc.malloc_trim.argtypes = [ctypes.c_size_t]
                libc.malloc_trim.restype = ctypes.c_int
                libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                libc.mallopt.restype = ctypes.c_int
                _glibc = libc
            except (OSError, AttributeError):  # no malloc_trim or mallopt: not glibc
                pass
    return _glibc or None


def private_arenas(limit: int = ARENAS) -> bool:
    """Let up to `limit` threads each have a malloc arena of their own (glibc only).

    Takes effect only before the process has 8 arenas (glibc fixes its limit then), so the
    job calls it before it creates a Kafka client; True if glibc took the setting."""
    libc = _libc()
    return libc is not None and bool(libc.mallopt(M_ARENA_MAX, limit))


def release_free_memory() -> bool:
    """Return the heap's free pages to the OS; True if glibc's ``malloc_trim`` ran."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True

"""millpond.stores.malloc.private_arenas: every thread of a job gets a malloc arena of its own.

glibc stops at 8 arenas a core; the threads after that share, starting with the main thread's
(the run loop's). The check runs in a fresh interpreter, as a job's process starts: it starts
more threads than glibc's limit, has each allocate, and counts the arenas glibc reports
(`malloc_info`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import ctypes, os, sys, tempfile, threading
    from millpond.stores.malloc import private_arenas
    if sys.argv[1] == "private":
        assert private_arenas(), "glibc refused M_ARENA_MAX"
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    threads = int(sys.argv[2])
    allocated = threading.Barrier(threads + 1)
    done = threading.Event()
    def work():
        libc.malloc(4096)  # the thread's first allocation takes it an arena
        allocated.wait(30)
        done.wait(30)
    started = [threading.Thread(target=work) for _ in range(threads)]
    for t in started:
        t.start()
    allocated.wait(30)
    path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, f)
    libc.fclose(f)
    done.set()
    for t in started:
        t.join(30)
    print(open(path).read().count("<heap nr="))
""")


def arenas(mode: str, threads: int) -> int:
    run = subprocess.run([sys.executable, "-c", PROBE, mode, str(threads)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return int(run.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_ARENA_MAX is glibc's")
def test_every_thread_gets_its_own_arena() -> None:
    limit = 8 * len(os.sched_getaffinity(0))  # glibc's default on 64-bit
    threads = limit + 8
    # Without it, glibc's limit holds: the last 8 threads share arenas (the first of them the
    # main thread's); with it, the main thread's arena and one a thread.
    assert arenas("default", threads) == limit
    assert arenas("private", threads) == threads + 1

"""A memory-capped cgroup for child processes (cgroup v1 or v2, whichever this machine has
writable), and running a command inside it with its peak RSS, the cgroup's own peak and its
OOM kills. Used by the memory-cap test (tests/tasks/test_memory_cap.py) and benchmark
(benchmarks/memory_cap.py)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


@dataclass
class Run:
    """What one capped command did."""

    returncode: int
    peak_rss: int  # bytes (the child's ru_maxrss: shared library pages included)
    peak_anon: int  # bytes: the highest RssAnon sampled every 0.2 s (what the cgroup charges)
    peak_file: int  # bytes: the highest RssFile sampled (libraries, mostly shared)
    output: str
    oom_kills: int  # the cgroup's OOM kills so far
    peak_cgroup: int = 0  # bytes: the cgroup's own peak charge during the run (its page
    # cache included; memory.max_usage_in_bytes on v1, memory.peak on v2; 0 if unreadable)
    wall_s: float = 0.0


class MemoryCgroup:
    """A child cgroup with a memory cap; ``close()`` removes it."""

    def __init__(self, path: Path, version: int, cap: int) -> None:
        self.path, self.version, self.cap = path, version, cap

    @classmethod
    def make(cls, cap: int) -> MemoryCgroup:
        """A new capped cgroup under this process's own; OSError if none can be made."""
        name = f"millpond-cap-{uuid.uuid4().hex[:8]}"
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        v1 = next((ln.split(":", 2)[2] for ln in lines if ln.split(":")[1] == "memory"), None)
        if v1 is not None and (ROOT / "memory").is_dir():
            path = ROOT / "memory" / v1.lstrip("/") / name
            path.mkdir()
            try:
                (path / "memory.limit_in_bytes").write_text(str(cap))
            except OSError:
                path.rmdir()
                raise
            return cls(path, 1, cap)
        v2 = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
        if v2 is not None and (ROOT / "cgroup.controllers").exists():
            parent = ROOT / v2.lstrip("/")
            path = parent / name
            path.mkdir()
            try:
                (path / "memory.max").write_text(str(cap))
                (path / "memory.swap.max").write_text("0")
            except OSError:
                path.rmdir()
                raise
            return cls(path, 2, cap)
        raise OSError("no cgroup memory controller (v1 or v2) in /proc/self/cgroup")

    @staticmethod
    def exists() -> bool:
        """Whether this machine has a cgroup memory controller at all."""
        return (ROOT / "memory").is_dir() or "memory" in _read(ROOT / "cgroup.controllers")

    def oom_kills(self) -> int:
        """OOM kills in this cgroup so far."""
        text = _read(self.path / ("memory.oom_control" if self.version == 1 else
                                  "memory.events"))
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def stat(self) -> dict[str, int]:
        """The cgroup's memory.stat (v1: rss, cache, ...; v2: anon, file, ...) and peak."""
        out = {k: int(v) for k, _, v in (ln.partition(" ") for ln in
                                         _read(self.path / "memory.stat").splitlines()) if v}
        peak = _read(self.path / ("memory.max_usage_in_bytes" if self.version == 1
                                  else "memory.peak")).strip()
        if peak:
            out["peak"] = int(peak)
        return out

    def peak(self) -> int:
        """The cgroup's peak charge in bytes (since it was made or last reset); 0 if unknown."""
        text = _read(self.path / ("memory.max_usage_in_bytes" if self.version == 1
                                  else "memory.peak")).strip()
        return int(text) if text.isdigit() else 0

    def reset_peak(self) -> None:
        """Start the cgroup's peak afresh where the kernel allows it (v1 always; v2 from
        Linux 6.12): each run's ``peak_cgroup`` is then its own."""
        try:
            (self.path / ("memory.max_usage_in_bytes" if self.version == 1
                          else "memory.peak")).write_text("0")
        except OSError:
            pass

    def run(self, args: list[str], cwd: Path, timeout: float,
            env: dict[str, str] | None = None, log_dir: Path | None = None) -> Run:
        """Run ``args`` inside the cgroup (it joins it before exec) to its end; its output
        goes through a file in ``log_dir`` (default ``cwd``), removed after."""
        log = (log_dir or cwd) / f".cgroup-run-{uuid.uuid4().hex[:8]}.log"
        self.reset_peak()
        started = time.monotonic()
        with open(log, "w") as out:
            proc = subprocess.Popen(
                ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"),
                 *args], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                env=None if env is None else {**os.environ, **env})
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        peaks = {"RssAnon:": 0, "RssFile:": 0}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                for line in _read(Path(f"/proc/{proc.pid}/status")).splitlines():
                    field, *rest = line.split()
                    if field in peaks and rest:
                        peaks[field] = max(peaks[field], int(rest[0]) * 1024)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            done.set()
            sampler.join()
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        text = log.read_text()
        log.unlink()
        return Run(proc.returncode, usage.ru_maxrss * 1024, peaks["RssAnon:"],
                   peaks["RssFile:"], text, self.oom_kills(), self.peak(), wall)

    def close(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""

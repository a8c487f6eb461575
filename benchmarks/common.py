"""Shared helpers of the benchmark harness: child processes with rusage, stats, machine info."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MILLPOND = str(BIN / "millpond")
VENVS = Path(os.environ.get("MILLPOND_BENCH_VENVS", Path.home() / ".cache/millpond/bench-venvs"))


@dataclass
class Child:
    """What one child process did: exit code, wall clock, CPU and peak RSS (from wait4)."""

    cmd: list[str]
    returncode: int
    started: float  # time.time() just before the fork
    exited: float  # time.time() right after wait4 returned
    cpu_s: float  # user + system CPU of the child (and its waited-for children)
    maxrss_mb: float  # peak RSS (VmHWM) of the child's own address space, polled
    stdout: str
    stderr: str
    timed_out: bool = False
    load_before: list[float] = field(default_factory=list)  # 1/5/15-min load at the fork
    steal_percent: float | None = None  # CPU steal of the whole machine while it ran
    pressure_percent: float | None = None  # CPU pressure (PSI "some") while it ran

    @property
    def wall_s(self) -> float:
        return self.exited - self.started

    def tail(self, n: int = 3000) -> str:
        return (self.stdout + "\n" + self.stderr)[-n:]


def run_child(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path = REPO,
              timeout: float = 600, logdir: Path | None = None, name: str = "child") -> Child:
    """Run ``cmd`` to its end; its rusage is taken with ``os.wait4`` (this child only)."""
    return start_child(cmd, env=env, cwd=cwd, logdir=logdir, name=name).wait(timeout)


def start_child(cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path = REPO,
                logdir: Path | None = None, name: str = "child") -> Running:
    """Start ``cmd`` (stdout and stderr to ``<logdir>/<name>.out|.err``, the environment
    this process's plus ``env``); :meth:`Running.wait` or :meth:`Running.stop` reaps it."""
    return Running(cmd, env, cwd, logdir or Path(os.environ.get("TMPDIR", "/tmp")), name)


class Running:
    """A child process started by :func:`start_child`, until ``wait`` or ``stop`` reaps it
    into a :class:`Child` (its rusage from ``os.wait4``: this child only)."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None, cwd: Path, logdir: Path,
                 name: str) -> None:
        logdir.mkdir(parents=True, exist_ok=True)
        self.cmd = cmd
        self._paths = logdir / f"{name}.out", logdir / f"{name}.err"
        self.load_before, self._ticks = load_average(), cpu_ticks()
        self._pressure = cpu_pressure()
        self._out, self._err = open(self._paths[0], "w"), open(self._paths[1], "w")  # noqa: SIM115 - closed in wait()
        self.started = time.time()
        try:
            self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=self._out, stderr=self._err,
                                         env={**os.environ, **(env or {})})
        except BaseException:
            self._out.close()
            self._err.close()
            raise
        self._peak = PeakRss(self.proc.pid)
        self._peak.start()

    def alive(self) -> bool:
        """Whether it still runs (asked without reaping it, so wait4 still gets its rusage)."""
        try:
            return os.waitid(os.P_PID, self.proc.pid,
                             os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
        except ChildProcessError:
            return False

    def _signal(self, signum: int) -> None:
        # os.kill, not Popen.send_signal: that polls first, and a poll would reap the child
        # (and its rusage) before wait4 does.
        if self.alive():
            os.kill(self.proc.pid, signum)

    def wait(self, timeout: float) -> Child:
        """Wait for its exit, killing it (SIGKILL) ``timeout`` seconds from now."""
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            self._signal(signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)
            exited = time.time()
        finally:
            timer.cancel()
            self._peak.stop()
            self._out.close()
            self._err.close()
        self.proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        return Child(self.cmd, self.proc.returncode, self.started, exited,
                     usage.ru_utime + usage.ru_stime, self._peak.mb,
                     self._paths[0].read_text(errors="replace"),
                     self._paths[1].read_text(errors="replace"), killed.is_set(),
                     self.load_before, steal_percent(self._ticks, cpu_ticks()),
                     pressure_percent(self._pressure, cpu_pressure()))

    def stop(self, grace: float = 60.0) -> Child:
        """SIGTERM, then wait up to ``grace`` seconds for it to exit (SIGKILL after that)."""
        self._signal(signal.SIGTERM)
        return self.wait(grace)


class PeakRss(threading.Thread):
    """Polls the child's VmHWM (its own peak RSS since exec) until it exits.

    Not ru_maxrss: on Linux a child's ru_maxrss also counts the parent's RSS at fork,
    and this harness holds the whole input in memory.
    """

    def __init__(self, pid: int, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.path = Path(f"/proc/{pid}/status")
        self.every = every
        self.kb = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            try:
                for line in self.path.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.kb = max(self.kb, int(line.split()[1]))
                        break
            except (OSError, ValueError):
                pass
            self._done.wait(self.every)

    def stop(self) -> None:
        self._done.set()
        self.join(1)

    @property
    def mb(self) -> float:
        return self.kb / 1024


@dataclass
class Series:
    """Repeated measurements of one figure."""

    values: list[float] = field(default_factory=list)

    def add(self, v: float) -> None:
        self.values.append(v)

    def summary(self) -> dict[str, Any]:
        return summarize(self.values)


def summarize(values: list[float]) -> dict[str, Any]:
    """Median, min and max of the runs (and the runs themselves)."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "runs": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals), "runs": vals}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) CPU ticks since boot from /proc/stat; (0, 0) where unavailable."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    steal = fields[7] if len(fields) > 7 else 0
    return steal, sum(fields[:8])


def cpu_pressure() -> tuple[float, int] | None:
    """(monotonic time, total µs) of the kernel's CPU pressure stall information "some"
    line: time in which at least one runnable task waited for a CPU. None where the kernel
    has no PSI."""
    try:
        line = Path("/proc/pressure/cpu").read_text().split("\n", 1)[0]
        return time.monotonic(), int(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def pressure_percent(start: tuple[float, int] | None,
                     end: tuple[float, int] | None) -> float | None:
    """Share of the wall time between two cpu_pressure() in which a runnable task waited for
    a CPU. This machine's hypervisor reports no steal (0.0% throughout) while a host burst
    stalls every process; PSI shows it (and the run's own demand over the 2 cores)."""
    if start is None or end is None or end[0] <= start[0]:
        return None
    return round(100.0 * (end[1] - start[1]) / 1e6 / (end[0] - start[0]), 1)


class Conditions:
    """Load average at the start and CPU steal over a span: ``with Conditions() as c: ...``."""

    def __enter__(self) -> Conditions:
        self.load_before = load_average()
        self._ticks = cpu_ticks()
        self.steal_percent: float | None = None
        return self

    def __exit__(self, *exc: object) -> None:
        self.steal_percent = steal_percent(self._ticks, cpu_ticks())

    def fields(self) -> dict[str, Any]:
        return {"load_average_before": self.load_before, "cpu_steal_percent": self.steal_percent}


def steal_percent(start: tuple[int, int], end: tuple[int, int]) -> float | None:
    """Share of CPU time the hypervisor gave to other guests between two cpu_ticks()."""
    total = end[1] - start[1]
    return round(100.0 * (end[0] - start[0]) / total, 1) if total > 0 else None


def venv_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def pip_version(python: Path, package: str) -> str | None:
    """The installed version of ``package`` in the interpreter ``python`` (None if absent)."""
    if not python.exists():
        return None
    out = subprocess.run(
        [str(python), "-c",
         f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True, text=True, timeout=60)
    return out.stdout.strip() if out.returncode == 0 else None


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")

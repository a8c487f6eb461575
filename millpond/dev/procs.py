"""The processes the dev servers started: recognising them again before signalling them.

A dev server (Kafka, S3Proxy, a Spark master or worker) runs detached, its pid kept in a state
file under its data dir so ``stop`` and ``status`` work from another process. A state file
can outlive its process (a reboot, a ``kill -9``, a removed data dir restored from a copy), and
the pid can by then belong to anyone's process. So a pid from a state file is signalled only
when :func:`is_ours` holds: the process runs (not a zombie), its command line holds the
markers its server put there (main class, data dir), and it started when the state file says
its server's process started (:func:`start_token`, recorded at start).

Both come from ``/proc`` on Linux, and from ``ps`` elsewhere (macOS, the BSDs). Where
neither answers, the process is *not* taken for ours: a server left running is stopped by
hand, but no stranger is ever signalled.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from millpond.files import write_atomically

log = logging.getLogger(__name__)

_PROC = Path("/proc")


def read_state(path: Path) -> dict[str, Any]:
    """A dev server's state file (JSON: its pid, ports, start token); empty if it is missing
    or unreadable."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def int_of(state: dict[str, Any], key: str) -> int | None:
    """``state[key]`` if it is an integer (not a bool), else None."""
    value = state.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file at ``path`` atomically (its directory created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(state))


def running_pid(path: Path, markers: Sequence[str]) -> int | None:
    """The pid the state file at ``path`` names, if that process runs and :func:`is_ours`."""
    state = read_state(path)
    pid = int_of(state, "pid")
    return pid if pid is not None and is_ours(pid, markers, state.get("started")) else None


def stop_recorded(path: Path, markers: Sequence[str], timeout: float) -> int | None:
    """:func:`terminate` the process the state file at ``path`` names; its pid if it was
    ours and running, else None."""
    state = read_state(path)
    pid = int_of(state, "pid")
    if pid is None or not terminate([(pid, markers, state.get("started"))], timeout):
        return None
    return pid


def alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _proc_stat(pid)
    if stat is not None:
        return stat[0] != "Z"
    state = _ps(pid, "state")
    return state is None or not state.startswith("Z")


def command_line(pid: int) -> str | None:
    """``pid``'s command line, arguments joined by spaces; None if it cannot be read."""
    for _ in range(50):
        try:
            raw = (_PROC / str(pid) / "cmdline").read_bytes()
        except OSError:
            return _ps(pid, "command")
        if raw:
            return " ".join(os.fsdecode(part) for part in raw.split(b"\0") if part)
        # Empty for a moment while a process just spawned execs (and for zombies).
        if not alive(pid):
            return ""
        time.sleep(0.01)
    return ""


def start_token(pid: int) -> str | None:
    """When ``pid`` started, as a string that is the same for the same process and differs
    for a later one with the same pid (``/proc``'s start time in clock ticks since boot, or
    ``ps``'s start time); None if it cannot be read."""
    stat = _proc_stat(pid)
    if stat is not None and len(stat) > 19:
        return f"proc:{stat[19]}"
    started = _ps(pid, "lstart")
    return f"ps:{started}" if started else None


def is_ours(pid: int, markers: Sequence[str], started: str | None) -> bool:
    """True if ``pid`` is the process a dev server started: alive, its command line holding
    every one of ``markers``, and (when ``started`` was recorded) with that start token.
    False where the command line cannot be read (nothing is assumed)."""
    if not alive(pid):
        return False
    cmdline = command_line(pid)
    if cmdline is None:
        log.warning("cannot read the command line of pid %d (no /proc, no ps): not treating "
                    "it as a millpond dev server; stop that server by hand if it is one", pid)
        return False
    if not all(marker in cmdline for marker in markers):
        return False
    if started is None:
        return True  # a state file from before start tokens were recorded
    now = start_token(pid)
    return now is None or now == started or now.split(":")[0] != started.split(":")[0]


def signal_ours(pid: int, sig: int, markers: Sequence[str], started: str | None, *,
                group: bool = False) -> bool:
    """Send ``sig`` to ``pid`` (its process group with ``group``) if :func:`is_ours`; True
    if it was sent."""
    if not is_ours(pid, markers, started):
        return False
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def terminate(processes: Sequence[tuple[int, Sequence[str], str | None]], timeout: float,
              *, group: bool = False) -> list[int]:
    """Stop each ``(pid, markers, started)`` that :func:`is_ours`: SIGTERM (to its process
    group with ``group``), SIGKILL to what still runs after ``timeout`` s. The pids that were
    ours (the caller reaps those that are its children)."""
    ours = [pid for pid, markers, started in processes
            if signal_ours(pid, signal.SIGTERM, markers, started, group=group)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in ours):
        time.sleep(0.1)
    for pid in ours:
        if alive(pid):
            try:
                if group:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return ours


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _ps(pid: int, field: str) -> str | None:
    """One ``ps`` column of ``pid`` (``-ww``: not cut), or None if ps cannot tell."""
    try:
        out = subprocess.run(["ps", "-ww", "-o", f"{field}=", "-p", str(pid)],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and text else None

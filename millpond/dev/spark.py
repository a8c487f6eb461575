"""A real Spark standalone cluster on loopback: one master and N workers, each its own JVM.

Started from the launcher script and jars the pyspark package ships (``bin/spark-class``),
so nothing is downloaded. ``millpond dev spark start|stop|status`` and the cluster tests use
it to run the ``millpond spark`` jobs the way they run on a real cluster: a driver that talks
to a master, and executors in other JVMs on the workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from millpond.dev import procs
from millpond.dev.errors import BrokerStartError, ToolMissingError
from millpond.dev.kafka import Echo, _quiet, cache_root, free_port, require_java17

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"  # heap of the master and worker daemons (executors get their own)
_STATE_FILE = "cluster.json"


def spark_home() -> Path:
    """The pyspark package's directory: it holds ``bin/spark-class`` and ``jars/``."""
    try:
        import pyspark
    except ImportError:
        raise ToolMissingError("a Spark cluster needs PySpark: pip install 'millpond[spark]'"
                               ) from None
    return Path(pyspark.__file__).resolve().parent


@dataclass
class ClusterStatus:
    """What ``status()`` reports: whether the master runs, its URL and its live workers."""

    running: bool
    master_url: str
    web_url: str
    workers: int = 0
    pids: list[int] = field(default_factory=list)


class LocalSparkCluster:
    """A standalone master and ``workers`` workers on 127.0.0.1, state under ``data_dir``.

    ``start()`` is idempotent; the ports are remembered in ``data_dir`` so a running cluster
    is found again by ``status()`` and ``stop()`` from another process.
    """

    def __init__(self, data_dir: Path | None = None, workers: int = 2, worker_cores: int = 1,
                 worker_memory: str = "1g", port: int | None = None,
                 web_port: int | None = None) -> None:
        self.data_dir = (data_dir or cache_root() / "spark-cluster").resolve()
        saved = self._read_state()
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.port = port or procs.int_of(saved, "port") or 7077
        self.web_port = web_port or procs.int_of(saved, "web_port") or 8080

    @property
    def master_url(self) -> str:
        """The ``--master`` URL drivers use."""
        return f"spark://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        """The master's web UI (its ``/json/`` view lists workers and applications)."""
        return f"http://127.0.0.1:{self.web_port}"

    def _state_path(self) -> Path:
        return self.data_dir / _STATE_FILE

    def _read_state(self) -> dict[str, Any]:
        return procs.read_state(self._state_path())

    def _daemons(self) -> list[tuple[int, list[str], str | None]]:
        """``(pid, command-line markers, start token)`` of each daemon the state file lists
        (a state file from before start tokens: any Spark daemon class, no token)."""
        out = []
        for entry in self._read_state().get("daemons", []):
            pid = procs.int_of(entry, "pid") if isinstance(entry, dict) else None
            if pid is not None:
                out.append((pid, [str(m) for m in entry.get("markers", [])],
                            entry.get("started")))
        for pid in self._read_state().get("pids", []):
            if isinstance(pid, int):
                out.append((pid, ["org.apache.spark.deploy."], None))
        return out

    def _running(self) -> list[int]:
        """The pids of the daemons the state file lists that run and are ours."""
        return [pid for pid, markers, started in self._daemons()
                if procs.is_ours(pid, markers, started)]

    def _env(self, log_dir: Path) -> dict[str, str]:
        home = spark_home()
        return {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": DAEMON_MEMORY, "SPARK_LOG_DIR": str(log_dir),
                "SPARK_CONF_DIR": str(self.data_dir / "conf")}

    def _spawn(self, name: str, main: str, *args: str) -> dict[str, Any]:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        out = open(logs / f"{name}.out", "ab")  # noqa: SIM115 - owned by the child
        try:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main, *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self._env(logs), start_new_session=True)
        finally:
            out.close()
        # The launcher script execs the JVM: same pid, same start time, and the main class
        # with its arguments (ports, work dir) on both command lines.
        return {"pid": proc.pid, "started": procs.start_token(proc.pid),
                "markers": [" ".join((main, *args))]}

    def master_state(self) -> dict[str, Any] | None:
        """The master's ``/json/`` document, or None if it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=2) as response:
                doc: dict[str, Any] = json.loads(response.read())
                return doc
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def worker_dirs(self) -> list[Path]:
        """Each worker's work directory (executors of every application run under it)."""
        return [self.data_dir / f"worker-{i}" for i in range(self.workers)]

    def status(self) -> ClusterStatus:
        """Whether the master answers, and how many workers it sees alive."""
        pids = self._running()
        doc = self.master_state() if pids else None
        alive = sum(1 for w in (doc or {}).get("workers", []) if w.get("state") == "ALIVE")
        return ClusterStatus(doc is not None, self.master_url, self.web_url, alive, pids)

    def status_line(self) -> tuple[bool, str]:
        """Whether the master answers, and one line for ``millpond dev spark status``."""
        st = self.status()
        if st.running:
            return True, f"running master={st.master_url} workers={st.workers} web={st.web_url}"
        return False, f"not running (master would be {st.master_url})"

    def start(self, timeout: float = 120.0, echo: Echo = _quiet) -> str:
        """Start the master and workers (or reuse a running cluster); return the master URL."""
        if self.status().running:
            self._wait(timeout)
            return self.master_url
        require_java17()
        self.port = self.port if self._free(self.port) else free_port()
        self.web_port = self.web_port if self._free(self.web_port) else free_port()
        (self.data_dir / "conf").mkdir(parents=True, exist_ok=True)
        daemons = [self._spawn("master", MASTER_CLASS, "--host", "127.0.0.1", "--port",
                               str(self.port), "--webui-port", str(self.web_port))]
        self._write_state(daemons)
        echo(f"Starting a Spark master on {self.master_url} (web UI {self.web_url}) ...")
        for i, work in enumerate(self.worker_dirs()):
            work.mkdir(parents=True, exist_ok=True)
            daemons.append(self._spawn(
                f"worker-{i}", WORKER_CLASS, "--host", "127.0.0.1", "--cores",
                str(self.worker_cores), "--memory", self.worker_memory, "--work-dir", str(work),
                "--webui-port", str(free_port()), self.master_url))
            self._write_state(daemons)
        try:
            self._wait(timeout)
        except BrokerStartError:
            self.stop()
            raise
        echo(f"Spark cluster up: {self.workers} workers, {self.worker_cores} core(s) and "
             f"{self.worker_memory} each")
        return self.master_url

    def _write_state(self, daemons: list[dict[str, Any]]) -> None:
        procs.write_state(self._state_path(), {"daemons": daemons, "port": self.port,
                                               "web_port": self.web_port})

    @staticmethod
    def _free(port: int) -> bool:
        from millpond.dev.kafka import _port_free

        return _port_free(port)

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status.running and status.workers >= self.workers:
                return
            if not status.pids:
                break
            time.sleep(0.5)
        raise BrokerStartError(
            f"the Spark cluster at {self.master_url} did not show {self.workers} live workers "
            f"within {timeout:.0f}s; see {self.data_dir / 'logs'}:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        tails = []
        for path in sorted((self.data_dir / "logs").glob("*.out")):
            try:
                tails.append(f"== {path.name}\n{path.read_text(errors='replace')[-800:]}")
            except OSError:
                continue
        return "\n".join(tails)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every daemon (SIGTERM, SIGKILL after ``timeout``); True if any ran."""
        # The launcher script and its JVM: the process group of each daemon we started.
        stopped = procs.terminate(self._daemons(), timeout, group=True)
        if self._state_path().exists():
            self._write_state([])
        return bool(stopped)

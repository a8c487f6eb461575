"""A real single-node Apache Kafka 4.x broker, provisioned from Maven Central jars.

No Docker is needed: the broker's jars are gathered once with Maven into a cache
directory outside the repository, and the broker runs in KRaft combined mode on
127.0.0.1 with a small heap. Used by ``millpond dev kafka``, ``make kafka-up`` and
the test suite.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from millpond.dev import procs
from millpond.dev import properties as java_properties
from millpond.dev.errors import BrokerStartError, PortInUseError, ToolMissingError
from millpond.dev.maven import COMPLETE_MARKER, fetch_jars
from millpond.dev.tls import write_private

KAFKA_VERSION = "4.1.1"
DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9093
DEFAULT_HEAP = "-Xmx512m -Xms128m"
# The broker JVM's collector: G1 (Kafka's default) paused this small-heap broker 9-165 ms
# every few seconds, stalling every client at once; ZGC's pauses are under a millisecond
# (the latency bench's floor: p99 ~14 ms instead of 66-127; docs/benchmarks.md).
GC_FLAGS = {"g1": "-XX:+UseG1GC", "zgc": "-XX:+UseZGC"}
_STATE_FILE = "broker.json"

Echo = Callable[[str], None]


def _quiet(_: str) -> None:
    """Discard progress messages."""


def cache_root() -> Path:
    """Where millpond keeps downloaded jars and dev-broker data (``$MILLPOND_CACHE``)."""
    env = os.environ.get("MILLPOND_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "millpond"


def java_major_version(java: str = "java") -> int:
    """Return the major version of the ``java`` on PATH, or raise if there is none."""
    exe = shutil.which(java)
    if exe is None:
        raise ToolMissingError(
            "Java 17 or newer is required to run the local Kafka broker, but `java` is not "
            "on PATH. Install a JDK 17+ (e.g. `apt-get install openjdk-17-jdk-headless`)."
        )
    out = subprocess.run([exe, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        raise ToolMissingError(f"could not read the Java version from `java -version`: {out.stderr!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    return major


def require_java17() -> None:
    """Raise :class:`ToolMissingError` unless Java 17+ is installed."""
    major = java_major_version()
    if major < 17:
        raise ToolMissingError(
            f"Kafka 4.x needs Java 17 or newer; `java` on PATH is Java {major}. "
            "Install a JDK 17+ and put it first on PATH (or set JAVA_HOME/bin first)."
        )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    """True if nothing listens on 127.0.0.1:``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _kafka_uuid() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding.

    Never one that starts with "-" (1 in 64 would): kafka-storage's argument parser takes
    ``-t -abc...`` for a missing id and an option, and the broker never formats. Kafka's
    own ``Uuid.randomUuid()`` skips those ids for the same reason."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def provision(version: str = KAFKA_VERSION, echo: Echo = _quiet) -> Path:
    """Make sure the broker's jars for ``version`` are in the cache; return the libs dir.

    The download happens once; later calls return at once.
    """
    home = cache_root() / f"kafka-{version}"
    if not (home / "libs" / COMPLETE_MARKER).exists():
        require_java17()
    return fetch_jars(f"Apache Kafka {version}", "kafka-pom.xml", {"KAFKA_VERSION": version},
                      home, "kafka_2.13-*.jar", echo)


def _argfile_quote(arg: str) -> str:
    """One argument for a ``java @argfile`` (double-quoted; backslash escapes inside)."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class BrokerStatus:
    """What ``status()`` reports about a local broker."""

    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path


class LocalKafka:
    """One single-node KRaft broker on loopback, whose data lives in ``data_dir``.

    ``start()`` is idempotent: a broker already running for the same data dir is
    reused. Ports are remembered in the data dir so a restart keeps its address.

    This one is plaintext; :class:`millpond.dev.secure_kafka.SecureLocalKafka` changes the
    listeners (:meth:`listener_properties`), what clients need to connect
    (:meth:`client_config`) and the users made at format (:meth:`format_args`).
    """

    default_port = DEFAULT_PORT
    default_controller_port = DEFAULT_CONTROLLER_PORT
    default_heap = DEFAULT_HEAP
    data_dir_name = "data"

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int | None = None,
        controller_port: int | None = None,
        version: str = KAFKA_VERSION,
        heap: str | None = None,
        extra_config: dict[str, str] | None = None,
        gc: str = "g1",
    ) -> None:
        if gc not in GC_FLAGS:
            raise ValueError(f"unknown collector {gc!r}: one of {', '.join(GC_FLAGS)}")
        self.gc = gc  # for a broker this starts; a running one is reused as it is
        self.version = version
        self.data_dir = (data_dir or cache_root() / f"kafka-{version}" / self.data_dir_name).resolve()
        saved = self._read_state()
        self.port = port or procs.int_of(saved, "port") or self.default_port
        self.controller_port = (controller_port or procs.int_of(saved, "controller_port")
                                or self.default_controller_port)
        self.heap = heap or self.default_heap
        self.extra_config = dict(extra_config or {})
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` string clients use."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        """The broker's own log (log4j), for diagnosing start failures."""
        return self.data_dir / "logs" / "server.log"

    def _state_path(self) -> Path:
        return self.data_dir / _STATE_FILE

    def _read_state(self) -> dict[str, Any]:
        return procs.read_state(self._state_path())

    def _write_state(self, pid: int) -> None:
        procs.write_state(self._state_path(), {
            "pid": pid, "started": procs.start_token(pid), "port": self.port,
            "controller_port": self.controller_port})

    def _markers(self) -> list[str]:
        """What the broker's command line holds: its main class and data dir."""
        return ["kafka.Kafka", str(self.data_dir)]

    def client_config(self) -> dict[str, str]:
        """The librdkafka settings a client needs to reach this broker (with admin rights)."""
        return {"bootstrap.servers": self.bootstrap}

    def listener_properties(self) -> dict[str, str]:
        """The listeners: a plaintext one for clients and the broker itself, the controller's."""
        return {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }

    def format_args(self) -> list[str]:
        """Arguments added to ``kafka-storage format`` (none here; SCRAM users when secured)."""
        return []

    def server_properties(self) -> dict[str, str]:
        """The broker configuration: KRaft combined mode, settings suited to tests."""
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            **self.listener_properties(),
            "log.dirs": str(self.data_dir / "kraft-logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "500",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
            "num.io.threads": "2",
            "num.network.threads": "2",
            # No deletion by age unless a topic sets retention.ms: a window or join result is
            # timestamped with its event time, and the examples' and tests' event times are
            # in 1970 or 2024, which the default 7 days deleted at the next retention check
            # (every 5 minutes): an output read a few seconds later was sometimes empty.
            "log.retention.ms": "-1",
        }
        props.update(self.extra_config)
        return props

    def _java_cmd(self, libs: Path, main: str, *args: str) -> list[str]:
        log4j = resources.files("millpond.dev").joinpath("log4j2.properties")
        return [
            "java", *self.heap.split(), GC_FLAGS[self.gc], "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={self.data_dir / 'logs'}",
            f"-Dmillpond.data.dir={self.data_dir}",
            "-cp", f"{libs}/*", main, *args,
        ]

    def status(self) -> BrokerStatus:
        """Whether a broker for this data dir runs, and where."""
        pid = procs.running_pid(self._state_path(), self._markers())
        return BrokerStatus(pid is not None, pid, self.bootstrap, self.data_dir)

    def status_line(self) -> tuple[bool, str]:
        """Whether it runs, and one line for ``millpond dev kafka status``."""
        st = self.status()
        if st.running:
            gc = running_gc(st.pid) if st.pid is not None else None
            return True, (f"running pid={st.pid} bootstrap={st.bootstrap} data={st.data_dir}"
                          + (f" gc={gc}" if gc else ""))
        return False, f"not running (bootstrap would be {st.bootstrap}, data={st.data_dir})"

    def start(self, timeout: float = 90.0, echo: Echo = _quiet) -> str:
        """Start the broker (or reuse a running one) and wait until it answers metadata."""
        if self.status().running:
            self.wait_ready(timeout)
            return self.bootstrap
        require_java17()
        for port in (self.port, self.controller_port):
            if not _port_free(port):
                raise PortInUseError(
                    f"port 127.0.0.1:{port} is already in use by another process; stop it or "
                    f"choose another port (millpond dev kafka --port N start)")
        libs = provision(self.version, echo)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        conf = self.data_dir / "server.properties"
        # 0600: a secured broker's file holds its users' passwords (JAAS settings).
        java_properties.write(conf, self.server_properties(), 0o600)
        if not (self.data_dir / "kraft-logs" / "meta.properties").exists():
            self._format(libs, conf)
        out = open(self.data_dir / "logs" / "broker.out", "ab")  # noqa: SIM115 - owned by the child
        try:
            self._proc = subprocess.Popen(
                self._java_cmd(libs, "kafka.Kafka", str(conf)),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            out.close()
        self._write_state(self._proc.pid)
        echo(f"Starting Kafka {self.version} on {self.bootstrap} (pid {self._proc.pid}) ...")
        try:
            self.wait_ready(timeout)
        except BrokerStartError:
            self.stop()
            raise
        return self.bootstrap

    def _format(self, libs: Path, conf: Path) -> None:
        """Format a new data dir once; a formatted one keeps its cluster id across restarts.

        The tool's class and arguments go to the JVM in an argument file (``java @file``,
        mode 0600, removed after): ``--add-scram`` carries passwords, which must never be on
        a command line that ``ps`` shows."""
        args = ["kafka.tools.StorageTool", "format", "-t", _kafka_uuid(), "-c", str(conf),
                "--standalone", *self.format_args()]
        argfile = self.data_dir / "format.args"
        write_private(argfile, "".join(_argfile_quote(a) + "\n" for a in args))
        try:
            fmt = subprocess.run(self._java_cmd(libs, f"@{argfile}"),
                                 capture_output=True, text=True, check=False)
        finally:
            argfile.unlink(missing_ok=True)
        if fmt.returncode != 0:
            raise BrokerStartError(f"kafka-storage format failed:\n{(fmt.stdout + fmt.stderr)[-2000:]}")

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Block until a metadata request to the broker succeeds, or raise."""
        from millpond.kafka import clients

        deadline = time.monotonic() + timeout
        # A short reconnect backoff: librdkafka's grows to 10 s while the broker boots, which
        # would report it ready up to 10 s late.
        admin = clients.admin({**self.client_config(), "log_level": 0,
                               "reconnect.backoff.max.ms": 100})
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            pid = procs.int_of(self._read_state(), "pid")
            if self._proc is not None and self._proc.poll() is not None or (
                pid is not None and not procs.alive(pid)
            ):
                raise BrokerStartError(
                    f"the Kafka broker exited during start-up; see {self.log_file} and "
                    f"{self.data_dir / 'logs' / 'broker.out'}:\n{self._log_tail()}"
                )
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception as exc:  # KafkaException while the broker boots
                last_error = exc
            time.sleep(0.2)
        raise BrokerStartError(
            f"the Kafka broker on {self.bootstrap} did not answer within {timeout:.0f}s "
            f"({last_error}); see {self.log_file}"
        )

    def _log_tail(self) -> str:
        for path in (self.data_dir / "logs" / "broker.out", self.log_file):
            try:
                return path.read_text(errors="replace")[-2000:]
            except OSError:
                continue
        return ""

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker cleanly (SIGTERM, then SIGKILL after ``timeout``); True if it ran."""
        pid = procs.stop_recorded(self._state_path(), self._markers(), timeout)
        if pid is None:
            return False
        if self._proc is not None and self._proc.pid == pid:
            self._proc.wait(timeout=10)  # our child: reap it
        self._proc = None
        return True


def running_gc(pid: int) -> str | None:
    """The collector (a :data:`GC_FLAGS` name) of the broker JVM ``pid``, from its command
    line; None if it cannot be read or names none of them."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for name, flag in GC_FLAGS.items():
        if flag.encode() in args:
            return name
    return None

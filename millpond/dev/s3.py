"""A real S3 API server on loopback: S3Proxy with its filesystem backend.

S3Proxy (``org.gaul:s3proxy``) is fetched once from Maven Central, like the Kafka broker,
and serves the S3 REST API (signature v2 and v4) over a local directory. State backups and
their tests use it through the same ``s3://`` code path (fsspec + s3fs) as a user's AWS,
MinIO or GCS-interop bucket. Used by ``millpond dev s3`` and the test suite.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from millpond.dev import procs
from millpond.dev import properties as java_properties
from millpond.dev.errors import BrokerStartError, PortInUseError
from millpond.dev.kafka import Echo, _port_free, _quiet, cache_root, require_java17
from millpond.dev.maven import COMPLETE_MARKER, fetch_jars

S3PROXY_VERSION = "4.1.0"
DEFAULT_PORT = 9000
# S3Proxy's filesystem backend holds multipart-upload parts in memory: s3fs sends files over
# 50 MB as 50 MB parts, several at once, and a 128 MiB heap ran out of memory on a 60 MB SST
# (measured: 256 MiB still had OutOfMemoryErrors that s3fs retried; 512 MiB none).
DEFAULT_HEAP = "-Xmx512m"
IDENTITY = "millpond"  # the access key id and secret of the local server
CREDENTIAL = "millpond-secret"
_STATE_FILE = "s3proxy.json"


def provision(version: str = S3PROXY_VERSION, echo: Echo = _quiet) -> Path:
    """Make sure S3Proxy's jars are in the cache (fetched once); return the libs dir."""
    home = cache_root() / f"s3proxy-{version}"
    if not (home / "libs" / COMPLETE_MARKER).exists():
        require_java17()
    return fetch_jars(f"S3Proxy {version}", "s3proxy-pom.xml", {"S3PROXY_VERSION": version},
                      home, "s3proxy-*.jar", echo)


@dataclass(frozen=True)
class S3Status:
    """What ``status()`` reports about a local S3 server."""

    running: bool
    pid: int | None
    endpoint: str
    data_dir: Path


class LocalS3:
    """One S3Proxy on 127.0.0.1 whose buckets are directories under ``data_dir/buckets``.

    ``start()`` is idempotent; the port is remembered in ``data_dir`` so a restart keeps
    the endpoint, and buckets and objects survive restarts.
    """

    def __init__(self, data_dir: Path | None = None, port: int | None = None,
                 version: str = S3PROXY_VERSION, heap: str = DEFAULT_HEAP) -> None:
        self.version = version
        self.data_dir = (data_dir or cache_root() / f"s3proxy-{version}" / "data").resolve()
        saved = self._read_state()
        self.port = port or procs.int_of(saved, "port") or DEFAULT_PORT
        self.heap = heap
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL clients use."""
        return f"http://127.0.0.1:{self.port}"

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options that reach this server (``fsspec.filesystem("s3", **opts)``)."""
        return {"key": IDENTITY, "secret": CREDENTIAL,
                "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"}}

    def _state_path(self) -> Path:
        return self.data_dir / _STATE_FILE

    def _read_state(self) -> dict[str, Any]:
        return procs.read_state(self._state_path())

    def _markers(self) -> list[str]:
        """What the server's command line holds: its main class and data dir."""
        return ["org.gaul.s3proxy.Main", str(self.data_dir)]

    def properties(self) -> dict[str, str]:
        """S3Proxy's configuration: loopback endpoint, one identity, filesystem backend."""
        return {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": IDENTITY,
            "s3proxy.credential": CREDENTIAL,
            "jclouds.provider": "filesystem-nio2",
            "jclouds.filesystem.basedir": str(self.data_dir / "buckets"),
        }

    def status(self) -> S3Status:
        """Whether a server for this data dir runs, and where."""
        pid = procs.running_pid(self._state_path(), self._markers())
        return S3Status(pid is not None, pid, self.endpoint, self.data_dir)

    def status_line(self) -> tuple[bool, str]:
        """Whether it runs, and one line for ``millpond dev s3 status``."""
        st = self.status()
        if st.running:
            return True, (f"running pid={st.pid} endpoint={st.endpoint} key={IDENTITY} "
                          f"secret={CREDENTIAL} data={st.data_dir}")
        return False, f"not running (endpoint would be {st.endpoint}, data={st.data_dir})"

    def start(self, timeout: float = 60.0, echo: Echo = _quiet) -> str:
        """Start the server (or reuse a running one), wait until it answers; the endpoint."""
        if self.status().running:
            self.wait_ready(timeout)
            return self.endpoint
        if not _port_free(self.port):
            raise PortInUseError(
                f"port 127.0.0.1:{self.port} is already in use by another process; stop it or "
                "choose another port (millpond dev s3 --port N start)")
        libs = provision(self.version, echo)
        (self.data_dir / "buckets").mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "s3proxy.conf"
        java_properties.write(conf, self.properties())
        logback = resources.files("millpond.dev").joinpath("s3proxy-logback.xml")
        out = open(self.data_dir / "s3proxy.out", "ab")  # noqa: SIM115 - owned by the child
        try:
            self._proc = subprocess.Popen(
                ["java", *self.heap.split(), f"-Dlogback.configurationFile={logback}",
                 f"-Dmillpond.data.dir={self.data_dir}", "-cp", f"{libs}/*",
                 "org.gaul.s3proxy.Main", "--properties", str(conf)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            out.close()
        procs.write_state(self._state_path(), {
            "pid": self._proc.pid, "started": procs.start_token(self._proc.pid), "port": self.port})
        echo(f"Starting S3Proxy {self.version} on {self.endpoint} (pid {self._proc.pid}; access "
             f"key {IDENTITY}, secret {CREDENTIAL}) ...")
        try:
            self.wait_ready(timeout)
        except BrokerStartError:
            self.stop()
            raise
        return self.endpoint

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server answers HTTP (any status: it wants signed requests)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                break
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # 403 to an anonymous request: it is up
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        tail = ""
        try:
            tail = (self.data_dir / "s3proxy.out").read_text(errors="replace")[-2000:]
        except OSError:
            pass
        raise BrokerStartError(f"S3Proxy on {self.endpoint} did not answer within "
                               f"{timeout:.0f}s:\n{tail}")

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); True if it ran."""
        pid = procs.stop_recorded(self._state_path(), self._markers(), timeout)
        if pid is None:
            return False
        if self._proc is not None and self._proc.pid == pid:
            self._proc.wait(timeout=10)  # our child: reap it
        return True

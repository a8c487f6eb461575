"""``millpond spark rebuild`` and ``audit`` on the secured broker (SASL_SSL, SCRAM, ACLs on)
with nothing but the job's properties file: Spark's Kafka client gets the job's settings
(a JAAS line built from the user and the password, the PEM CA), as a principal granted
exactly what ``millpond acls --role spark`` prints (enough for rescale, which writes, too),
and the password is on no process's command line while they run (every /proc/*/cmdline is
polled, the Spark JVM's included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.conftest import SecureKafka, unavailable
from tests.kafka.secure_util import (
    PASSWORD_VAR,
    change_acl,
    create_input,
    new_user,
    run_as,
    secured_job,
)
from tests.kafka_util import MILLPOND, REPO, write_properties
from tests.spark.test_cli import SPARK_ARGS, SPARK_TIMEOUT

pytestmark = [pytest.mark.kafka, pytest.mark.secure, pytest.mark.spark]

SPARK_JVM = b"org.apache.spark.deploy.SparkSubmit"


class ArgvWatch:
    """Polls the command line of every process on the machine until stopped: which held
    ``secret``, and whether a Spark JVM started by process ``root`` was seen."""

    def __init__(self, secret: str, root: int) -> None:
        self.secret, self.root = secret.encode(), root
        self.leaks: list[str] = []
        self.spark_jvms: set[int] = set()
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(0.02)

    def poll(self) -> None:
        parents: dict[int, int] = {}
        lines: dict[int, bytes] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                lines[int(entry.name)] = Path(entry.path, "cmdline").read_bytes()
                stat = Path(entry.path, "stat").read_text()
                parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
        for pid, line in lines.items():
            if self.secret in line:
                self.leaks.append(f"{pid}: {line[:300]!r}")
            if SPARK_JVM in line and self._descends(pid, parents):
                self.spark_jvms.add(pid)
        self.polls += 1

    def _descends(self, pid: int, parents: dict[int, int]) -> bool:
        for _ in range(64):
            if pid == self.root:
                return True
            pid = parents.get(pid, 0)
            if pid <= 1:
                return False
        return False


def spark_command(conf: Path, password: str, *args: str) -> tuple[dict[str, object], ArgvWatch]:
    """``millpond spark ARGS --config CONF`` with the password in the environment, every
    command line watched while it runs; its JSON result."""
    proc = subprocess.Popen([MILLPOND, "spark", *args, "--config", str(conf), *SPARK_ARGS],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, PASSWORD_VAR: password})
    watch = ArgvWatch(password, proc.pid)
    try:
        out, err = proc.communicate(timeout=SPARK_TIMEOUT)
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (args, out + err[-4000:])
    assert password not in out + err
    return json.loads(out), watch


def test_spark_rebuild_and_audit_with_the_printed_acls_and_no_secret_on_any_command_line(
    secure_kafka: SecureKafka, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    from millpond.spark.errors import SparkUnavailableError
    from millpond.spark.session import require_java, require_pyspark

    try:
        require_pyspark()
        require_java()
    except SparkUnavailableError as exc:
        unavailable(f"Spark cannot run: {exc}")
    name, source = topic_name("job"), topic_name("in")
    expected = create_input(secure_kafka, source, 2, 2000, 40)
    admin_password = secure_kafka.admin_config["sasl.password"]
    job_conf = write_properties(tmp_path / "job.properties", secured_job(
        secure_kafka, secure_kafka.admin_config, name, source, tmp_path / "state"))
    done = run_as(admin_password, "run", "--config", str(job_conf), "--bounded")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]

    # The spark commands' principal: exactly what `millpond acls --role spark` prints.
    user, password = new_user(secure_kafka, f"spark-{name[-8:]}")
    conf = write_properties(tmp_path / "spark.properties", secured_job(
        secure_kafka, secure_kafka.user_config(user, password), name, source,
        tmp_path / "state"))
    assert password not in conf.read_text()
    printed = run_as(password, "acls", "--config", str(conf), "--role", "spark",
                     "--format", "json")
    assert printed.returncode == 0, printed.stderr
    for acl in json.loads(printed.stdout)["spark"]:
        change_acl(secure_kafka, f"User:{user}", acl)
    checked = run_as(password, "check", "--config", str(conf), "--role", "spark")
    assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]

    # The watch sees what is on a command line: a marker on a child's.
    marker = f"marker-{os.urandom(4).hex()}"
    probe = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)", marker])
    watch = ArgvWatch(marker, probe.pid)
    probe.wait(timeout=30)
    watch.stop()
    assert watch.leaks and marker in watch.leaks[0]

    rebuilt, watch = spark_command(conf, password, "rebuild", "--store", "counts",
                                   "--out", str(tmp_path / "snap"), "--at-checkpoint")
    assert rebuilt["keys"] == len(expected) and rebuilt["records_read"], rebuilt
    assert not watch.leaks, watch.leaks
    assert watch.spark_jvms, f"no Spark JVM seen in {watch.polls} polls"

    audited, watch = spark_command(conf, password, "audit", "--store", "counts",
                                   "--at-checkpoint")
    totals = audited["totals"]
    assert audited["ok"] and totals["matching"] == len(expected), audited  # type: ignore[index]
    assert not watch.leaks, watch.leaks
    assert watch.spark_jvms, f"no Spark JVM seen in {watch.polls} polls"

    # The writing side of the role: rescale (inputs read, the job's group described, a new
    # changelog generation created and written from Spark's executors, the checkpoint topic
    # grown and written in one transaction as <group>-rescale).
    admin = AdminClient(secure_kafka.admin_config)
    admin.create_partitions([NewPartitions(source, 4)])[source].result(timeout=60)
    rescaled, watch = spark_command(conf, password, "rescale", "--partitions", "4")
    moved = rescaled["stores"]["counts"]  # type: ignore[index]
    assert rescaled["partitions_after"] == 4 and moved["keys"] == len(expected), rescaled
    assert not watch.leaks, watch.leaks

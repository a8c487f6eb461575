"""Kafka going away under a running job (issue #38): a broker killed for 15 s or 120 s,
SIGSTOPped for 60 s, or down for the first 30 s of the job.

Each test runs its own broker (so killing it disturbs no other test) and one or two
`millpond run` processes of a counting job that emits every new count, while a producer
thread writes keyed input at a steady rate (its records wait out the outage in its queue).
The fault is proven by the broker's pid: a killed broker's process is gone and the restarted
one has a new pid; a stopped one is in state ``T``. Then: no process exits, every task commits
new input within 10 s of the broker answering, fewer than 200 log lines per process during
the outage, and at the end the counts equal the acknowledged input and the output holds
every count exactly once for ``read_committed`` readers.

`make test-faults` runs one case per fault; `make faults` (--faults-full) runs every fault
under effectively-once and exactly-once with one and two processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka import Producer

from tests.kafka_util import (
    MILLPOND,
    REPO,
    checkpoint_records,
    count_output_diff,
    counting_job,
    create_topic,
    dump_store,
    hash_partition,
    millpond,
    state_diff,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
USERS = 400
RATE = 200.0  # input records per second
RESUME_S = 10.0  # every task commits new input within this long after the broker answers
MAX_LINES = 200  # log lines per process during an outage


@dataclass(frozen=True)
class Case:
    fault: str  # "kill": SIGKILL then restart; "stop": SIGSTOP then SIGCONT; "start": down at start
    seconds: float
    guarantee: str
    processes: int

    @property
    def id(self) -> str:
        return f"{self.fault}{self.seconds:.0f}s-{self.guarantee}-{self.processes}p"


FAULTS = (("kill", 15.0), ("kill", 120.0), ("stop", 60.0), ("start", 30.0))
EXTRA = tuple(Case("kill", float(s), "exactly-once", 1)
              for s in os.environ.get("MILLPOND_OUTAGE_KILL_S", "").split(",") if s)
SHORT = (
    Case("kill", 15.0, "effectively-once", 2),
    Case("kill", 120.0, "exactly-once", 1),
    Case("stop", 60.0, "exactly-once", 2),
    Case("start", 30.0, "effectively-once", 2),
)
FULL = tuple(Case(f, s, g, n) for f, s in FAULTS for g in ("effectively-once", "exactly-once")
             for n in (1, 2))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = EXTRA or (FULL if metafunc.config.getoption("--faults-full") else SHORT)
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


class Input(threading.Thread):
    """Keyed JSON input at ``RATE`` records/s until stopped; ``expected`` counts the records
    the broker acknowledged. Its records outlive any outage here (10-minute timeout)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True, "message.timeout.ms": 600_000,
                                  "log_level": 0})
        self.expected: Counter[str] = Counter()
        self.ends: dict[int, int] = {}  # partition -> next offset after its last acked record
        self.errors: list[str] = []
        self.sent = 0
        self._halt = threading.Event()

    def _acked(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err.str())
            return
        self.expected[json.loads(msg.value())["user_id"]] += 1
        self.ends[msg.partition()] = max(self.ends.get(msg.partition(), 0), msg.offset() + 1)

    def run(self) -> None:
        began = time.monotonic()
        while not self._halt.is_set():
            while self.sent < int((time.monotonic() - began) * RATE):
                user = f"user-{(self.sent * 7919) % USERS}"
                self.producer.produce(self.topic, json.dumps({"user_id": user, "i": self.sent}),
                                      user.encode(), hash_partition(user, PARTITIONS),
                                      on_delivery=self._acked)
                self.sent += 1
            self.producer.poll(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join(30)
        assert self.producer.flush(120) == 0, "input records left unacknowledged"
        assert not self.errors, f"input delivery errors: {self.errors[:3]}"


@dataclass
class Job:
    """One `millpond run` process, its output in ``log``."""

    config: Path
    log: Path
    popen: subprocess.Popen[bytes]
    fh: IO[bytes]

    @classmethod
    def start(cls, config: Path, log: Path) -> Job:
        fh = open(log, "ab")  # noqa: SIM115 - closed in wait()
        popen = subprocess.Popen([MILLPOND, "run", "--config", str(config)], cwd=REPO,
                                 stdout=fh, stderr=subprocess.STDOUT,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return cls(config, log, popen, fh)

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def alive(self) -> None:
        rc = self.popen.poll()
        assert rc is None, f"{self.log.name} exited ({rc}):\n" + "\n".join(self.lines()[-40:])

    def stop(self, timeout: float = 60) -> int:
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            stacks = dump_stacks(self.popen.pid)
            self.popen.kill()
            self.popen.wait(10)
            raise AssertionError(f"{self.log.name} did not stop on SIGTERM within {timeout}s:\n"
                                 + "\n".join(self.lines()[-40:]) + "\n" + stacks) from None
        finally:
            self.fh.close()


def dump_stacks(pid: int) -> str:
    """Every thread's Python and native stack of a hung process (py-spy, from the dev
    extra), so a hang names where it waits."""
    spy = Path(MILLPOND).with_name("py-spy")
    if not spy.exists():
        return "(no py-spy to dump the stacks)"
    try:
        out = subprocess.run([str(spy), "dump", "--native", "--pid", str(pid)],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "(py-spy dump did not finish within 60s)"
    return f"stacks of pid {pid}:\n{out.stdout}{out.stderr}"


def committed(bootstrap: str, job: str) -> dict[int, list[tuple[float, dict[str, int]]]]:
    """Every committed checkpoint per task (empty while the topic does not exist yet)."""
    try:
        return checkpoint_records(bootstrap, job)
    except Exception:  # noqa: BLE001 - no topic or no leader yet: nothing committed
        return {}


def wait_for(what: str, ok: Callable[[], bool], timeout: float, jobs: list[Job]) -> float:
    """Poll ``ok`` (and that every job lives) until true; the time it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in jobs:
            job.alive()
        if ok():
            return time.time()
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f}s\n" + "\n".join(
        f"--- {j.log.name}\n" + "\n".join(j.lines()[-30:]) for j in jobs))


def progress(bootstrap: str, name: str, source: str) -> dict[int, int]:
    """The highest committed input offset of each task."""
    return {p: max(ins.get(source, 0) for _, ins in recs)
            for p, recs in committed(bootstrap, name).items()}


def _state(pid: int) -> str:
    """The process state letter of ``pid`` (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def outage(broker: Any, case: Case, jobs: list[Job]) -> None:
    """Take the broker away for ``case.seconds`` (proving it by its pid), watching the jobs
    live meanwhile, and bring it back."""
    pid = broker.status().pid
    assert pid is not None, "the broker is not running"
    if case.fault == "stop":
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10  # the signal is delivered asynchronously
        while (state := _state(pid)) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state == "T", f"broker pid {pid} is in state {state}, not stopped"
    else:
        os.kill(pid, signal.SIGKILL)
        if broker._proc is not None:
            broker._proc.wait(30)
        assert not Path(f"/proc/{pid}").exists(), f"broker pid {pid} still exists after SIGKILL"
        assert not broker.status().running
    end = time.monotonic() + case.seconds
    while time.monotonic() < end:
        for job in jobs:
            job.alive()
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    if case.fault == "stop":
        os.kill(pid, signal.SIGCONT)
    else:
        broker.start(timeout=120)
        new = broker.status().pid
        assert new is not None and new != pid, f"the broker was not restarted (pid {new})"


def test_broker_outage(case: Case, own_broker: Any, topic_name: Callable[[str], str],
                       tmp_path: Path, report: Callable[..., None]) -> None:
    broker = own_broker
    bootstrap = broker.bootstrap
    source, sink, name = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    configs = []
    for i in range(case.processes):
        props = counting_job(bootstrap, name, source, tmp_path / f"state-{i}", **{
            "task.commit.ms": 1000, "task.processing.guarantee": case.guarantee,
            "emit.stream": f"kafka.{sink}",
            "systems.kafka.consumer.heartbeat.interval.ms": 1000})
        props["systems.kafka.consumer.group.instance.id"] = f"{name}-process-{i}"
        configs.append(write_properties(tmp_path / f"job-{i}.properties", props))
    feed = Input(bootstrap, source)
    feed.start()
    jobs: list[Job] = []
    try:
        before: dict[int, int] = {}
        if case.fault == "start":
            for i, conf in enumerate(configs):
                if i == 0:  # the broker goes away just before the first process starts
                    marks = [0]
                    down = threading.Thread(target=outage, args=(broker, case, []))
                    down.start()
                    time.sleep(1.0)
                jobs.append(Job.start(conf, tmp_path / f"job-{i}.log"))
            down.join(case.seconds + 150)
            assert not down.is_alive(), "the broker did not come back"
        else:
            jobs = [Job.start(conf, tmp_path / f"job-{i}.log") for i, conf in enumerate(configs)]
            wait_for("every task committed input", lambda: len(
                [o for o in progress(bootstrap, name, source).values() if o > 0]) == PARTITIONS,
                120, jobs)
            time.sleep(2.0)  # some work in flight when the broker goes
            marks = [len(j.lines()) for j in jobs]
            before = progress(bootstrap, name, source)
            outage(broker, case, jobs)
        back = time.time()
        resumed = wait_for(
            "every task committed new input after the broker came back",
            lambda: all(o > before.get(p, 0) for p, o in progress(bootstrap, name, source).items())
            and len(progress(bootstrap, name, source)) == PARTITIONS, 90, jobs)
        resume_s = resumed - back  # an upper bound: the polls take time too
        noisy = {j.log.name: len(j.lines()) - (marks[i] if i < len(marks) else 0)
                 for i, j in enumerate(jobs)}
        time.sleep(3.0)
        feed.stop()
        wait_for("the jobs caught up with the input", lambda: progress(
            bootstrap, name, source) == {p: feed.ends.get(p, 0) for p in range(PARTITIONS)},
            120, jobs)
        codes = [job.stop() for job in jobs]
    finally:
        for job in jobs:
            if job.popen.poll() is None:
                job.popen.kill()
    logs = "\n".join(f"--- {j.log.name}\n" + "\n".join(j.lines()[-40:]) for j in jobs)
    assert codes == [0] * len(jobs), logs
    for job in jobs:
        assert "Traceback" not in job.log.read_text(), job.log.read_text()[-4000:]
    # Every partition restored from the changelogs into a fresh directory: the processes'
    # own directories hold the partitions each had last.
    verify = write_properties(tmp_path / "verify.properties", {
        **counting_job(bootstrap, name, source, tmp_path / "verify"),
        "task.processing.guarantee": case.guarantee})
    restored = millpond("restore", "--config", str(verify))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    state = dump_store(verify, "counts")
    lost, dup = state_diff(state, feed.expected)
    out_lost, out_dup = count_output_diff(bootstrap, sink, feed.expected)
    outcome = (f"resumed in {resume_s:.1f}s, lines {max(noisy.values())}, "
               + ("exact" if lost == dup == out_lost == out_dup == 0 else "DIFF"))
    report(f"broker {case.id}", "the job rides through, resumes, finishes", lost + out_lost,
           dup + out_dup, outcome)
    assert (lost, dup) == (0, 0), f"state: {lost} lost, {dup} duplicated updates"
    assert (out_lost, out_dup) == (0, 0), f"output: {out_lost} lost, {out_dup} duplicated"
    assert resume_s <= RESUME_S, f"resumed {resume_s:.1f}s after the broker answered\n{logs}"
    assert max(noisy.values()) < MAX_LINES, f"log lines during the outage: {noisy}\n{logs}"

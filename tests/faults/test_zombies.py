"""Zombies (issue #21): paused processes, crashes, clean stops and scaling under live input.

Several `millpond run` processes of one job share 8 input partitions through the consumer
group, each with its own state directory, while a producer thread writes keyed input. A
seeded schedule SIGSTOPs a process for longer than ``session.timeout.ms`` (it loses its
partitions and, when resumed, is a zombie), SIGKILLs and restarts processes, stops them
cleanly, and scales out and in. Each run proves its zombies from the logs: every resumed
pause outlived the session timeout, and at least one paused owner saw another process
assigned its partitions during the pause and logged their loss or its fence on waking.
Afterwards one fresh process restores every store from the changelogs and processes to the
end; its two stores must match the producer's acknowledged input exactly (per partition)
under every guarantee, and the output (one record per input) must miss nothing: under
exactly-once it is exact read_committed, under the others its duplicates are counted and
reported. No process may exit by itself or log a traceback.

`make test-faults` runs one seed per guarantee; `make faults` (--faults-full) runs SEEDS_FULL seeds
per guarantee with longer chaos. A second test joins a process while another restores a
store of 300k (1M under --faults-full) changelog records.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka import Producer

from tests.jobs.two_stores import encode
from tests.kafka_util import (
    MILLPOND,
    REPO,
    create_topic,
    dump_store,
    read_topic,
    state_diff,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 8
USERS = 5000  # many keys: a stale value a zombie writes is rarely overwritten soon
SESSION_MS = 6000  # the broker's group.min.session.timeout.ms
RATE = 2000.0  # input msg/s: processes are busy, so a SIGSTOP often lands mid-batch or mid-commit
GUARANTEES = ["at-least-once", "effectively-once", "exactly-once"]
SEEDS_FULL = 10
SHORT_SEEDS = {"at-least-once": 1101, "effectively-once": 2202, "exactly-once": 3303}
BACKUP_SEED = 2204  # with backups on: its 25 s schedule had a SIGKILL and a scale-out and -in
TERM_EXIT_S = 45.0  # a SIGTERMed process must exit 0 within this
ASSIGNED = re.compile(r"assigned partitions \[([\d, ]*)\]")
# What a process that wakes up after its session expired logs: its partitions lost to another
# member (the group rebalanced without it), or its transaction refused (fenced).
ZOMBIE_SIGNS = ("were lost to another member", "was fenced")
OWNERSHIP = re.compile(r"(assigned partitions|revoking partitions|partitions) \[([\d, ]*)\]")
RUNS_LOG = REPO / "benchmarks" / "out" / "zombies-runs.jsonl"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One seed per guarantee for `make test-faults`, SEEDS_FULL under --faults-full."""
    if "zombie_case" not in metafunc.fixturenames:
        return
    full = metafunc.config.getoption("--faults-full")
    cases = [(g, SHORT_SEEDS[g] + i) for g in GUARANTEES
             for i in range(SEEDS_FULL if full else 1)]
    metafunc.parametrize("zombie_case", cases, ids=[f"{g}-seed{s}" for g, s in cases])


# ---- input with a reference built from delivery reports ---------------------------------

def user_partition(user: str) -> int:
    return int(user.rsplit("-", 1)[1]) % PARTITIONS


class InputProducer(threading.Thread):
    """Produces keyed input at ``rate`` msg/s until stopped; the reference holds only the
    records the broker acknowledged (delivery reports), per partition."""

    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.rate = topic, rate
        self.rng = random.Random(seed)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True, "acks": "all"})
        self.counts: dict[int, Counter[str]] = defaultdict(Counter)
        self.sums: dict[int, Counter[str]] = defaultdict(Counter)
        self.positions: set[str] = set()  # "<partition>:<offset>" of every acked record
        self.errors: list[str] = []
        self.sent = 0
        self._halt = threading.Event()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err.str())
            return
        value = json.loads(msg.value())
        p = msg.partition()
        self.counts[p][value["user_id"]] += 1
        self.sums[p][value["user_id"]] += value["amount"]
        self.positions.add(f"{p}:{msg.offset()}")

    def run(self) -> None:
        began = time.monotonic()
        while not self._halt.is_set():
            due = int((time.monotonic() - began) * self.rate)
            while self.sent < due:
                user = f"user-{self.rng.randrange(USERS)}"
                self.producer.produce(self.topic, encode(user, self.rng.randint(1, 100), self.sent),
                                      user.encode(), user_partition(user),
                                      on_delivery=self._on_delivery)
                self.sent += 1
            self.producer.poll(0.02)

    def stop(self) -> None:
        """Stop producing and wait for every delivery report."""
        self._halt.set()
        self.join(30)
        assert not self.is_alive(), "input producer did not stop"
        assert self.producer.flush(60) == 0, "input producer: records left unacknowledged"
        assert not self.errors, f"input producer delivery errors: {self.errors[:3]}"

    @property
    def acked(self) -> int:
        return len(self.positions)


# ---- processes -----------------------------------------------------------------------------

def job_properties(bootstrap: str, name: str, source: str, state: Path, guarantee: str,
                   **extra: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "job.name": name,
        "task.class": "tests.jobs.two_stores.TwoStores",
        "task.inputs": f"kafka.{source}",
        "task.commit.ms": 200,  # commits are frequent: SIGSTOPs land in them
        "task.processing.guarantee": guarantee,
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "systems.kafka.consumer.session.timeout.ms": SESSION_MS,
        "systems.kafka.consumer.heartbeat.interval.ms": 1000,
        "job.logged.store.base.dir": str(state),
    }
    for store in ("counts", "sums"):
        props.update({f"stores.{store}.factory": "rocksdb",
                      f"stores.{store}.key.serde": "string",
                      f"stores.{store}.msg.serde": "json",
                      f"stores.{store}.changelog": f"kafka.{name}-{store}-changelog"})
    props.update(extra)
    return props


def tail(path: Path, chars: int = 3000) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no log)"
    return text[-chars:]


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


@dataclass
class Stop:
    """One SIGSTOP: when (monotonic), the partitions the process held then, and the byte
    positions in the logs that bound what followed (the others' logs during the pause, its
    own from its SIGCONT), to read whether it came back a zombie."""

    at: float
    owned: set[int]
    others_from: dict[Path, int]  # the other processes' log sizes at the SIGSTOP
    resumed: float | None = None  # None: killed while stopped (never resumed)
    others_to: dict[Path, int] = field(default_factory=dict)  # ... at the SIGCONT
    own_from: int = 0  # its own log's size at the SIGCONT


@dataclass
class Proc:
    """One incarnation of a `millpond run` process, its output in ``log``."""

    name: str
    config: Path
    log: Path
    popen: subprocess.Popen[bytes]
    fh: IO[bytes]
    stopped_until: float | None = None  # SIGSTOPped; SIGCONT at this time
    signalled: str | None = None  # "kill" or "term" once we asked it to go
    term_deadline: float = 0.0
    owned: set[int] = field(default_factory=set)  # partitions it holds, as its log says
    last_ready: float = 0.0  # when its log last said a task was ready (catch-up follows)
    read_at: int = 0
    started: float = field(default_factory=time.monotonic)
    stops: list[Stop] = field(default_factory=list)

    def follow_log(self) -> None:
        """Track the partitions it holds from its log's assign/revoke/lost lines."""
        with open(self.log, "rb") as fh:
            fh.seek(self.read_at)
            data = fh.read()
        cut = data.rfind(b"\n") + 1
        self.read_at += cut
        text = data[:cut].decode(errors="replace")
        if " ready: restored " in text:
            self.last_ready = time.monotonic()
        for m in OWNERSHIP.finditer(text):
            parts = {int(x) for x in re.findall(r"\d+", m.group(2))}
            if m.group(1) == "assigned partitions":
                self.owned |= parts
            else:
                self.owned -= parts

    @classmethod
    def start(cls, name: str, config: Path, log: Path, *args: str,
              env: dict[str, str] | None = None) -> Proc:
        fh = open(log, "ab")  # noqa: SIM115 - closed in reap()
        fh.write(f"==== {name} started at {time.time():.3f}\n".encode())
        fh.flush()
        read_at = fh.tell()  # a restarted slot's log holds its earlier incarnations' lines
        popen = subprocess.Popen([MILLPOND, "run", "--config", str(config), *args], cwd=REPO,
                                 stdout=fh, stderr=subprocess.STDOUT,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        return cls(name, config, log, popen, fh, read_at=read_at)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            self.popen.send_signal(sig)

    def reap(self) -> int | None:
        rc = self.popen.poll()
        if rc is not None and not self.fh.closed:
            self.fh.close()
        return rc


@dataclass
class Tally:
    stops: int = 0
    kills: int = 0
    terms: int = 0
    scale_out: int = 0
    scale_in: int = 0
    stops_after_start: int = 0
    failures: list[str] = field(default_factory=list)


class Cluster:
    """The job's processes: slots with their own state dirs, started, signalled, checked."""

    def __init__(self, tmp: Path, make_config: Callable[[Path], Path], rng: random.Random) -> None:
        self.tmp, self.make_config, self.rng = tmp, make_config, rng
        self.slots: dict[int, Path] = {}  # slot -> config (its own state dir)
        self.procs: dict[int, Proc] = {}  # slot -> current incarnation
        self.restart_at: dict[int, float] = {}  # slot -> when to start it again
        self.retired: set[int] = set()
        self.history: list[Proc] = []
        self.followups: list[tuple[float, int | None]] = []  # (when, slot or None) to SIGSTOP
        self.tally = Tally()
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.incarnation = 0

    def add_slot(self) -> int:
        slot = len(self.slots)
        self.slots[slot] = self.make_config(self.tmp / f"state-{slot}")
        self.start(slot)
        return slot

    def start(self, slot: int) -> None:
        self.incarnation += 1
        proc = Proc.start(f"p{slot}.{self.incarnation}", self.slots[slot],
                          self.logs / f"p{slot}.log")
        self.procs[slot] = proc
        self.history.append(proc)
        self.restart_at.pop(slot, None)

    # -- what may be chosen
    def running(self) -> list[int]:
        return [s for s, p in self.procs.items() if p.alive and p.signalled is None]

    def awake(self) -> list[int]:
        return [s for s in self.running() if self.procs[s].stopped_until is None]

    def target(self, among: list[int], owner_bias: float = 0.85) -> int:
        """Mostly a process that holds partitions (a stopped one turns zombie; a killed one
        hands work over), else any of ``among``: start-up is slow, so most processes of a
        random pick would not have joined yet."""
        owners = [s for s in among if self.procs[s].owned]
        busy = self.busy(owners)
        if busy and self.rng.random() < 0.5:
            return self.rng.choice(busy)
        return self.rng.choice(owners if owners and self.rng.random() < owner_bias else among)

    def busy(self, slots: list[int]) -> list[int]:
        """Those that opened a task 0.5-4 s ago: catching up on the input that piled up
        meanwhile, so a SIGSTOP lands mid-batch or mid-commit (a stop of an idle process
        rarely makes a zombie: it notices the lost session before it writes anything)."""
        now = time.monotonic()
        return [s for s in slots if 0.5 < now - self.procs[s].last_ready < 4.0]

    def owners_awake(self) -> list[int]:
        return [s for s in self.awake() if self.procs[s].owned]

    def active_slots(self) -> int:
        return len(self.running()) + len(self.restart_at)

    def save_reference(self, path: Path, producer: InputProducer) -> None:
        path.write_text(json.dumps({"counts": producer.counts, "sums": producer.sums}))

    def fail(self, what: str, proc: Proc) -> None:
        self.tally.failures.append(f"{proc.name}: {what}\n--- tail of {proc.log.name} ---\n"
                                   f"{tail(proc.log)}")

    # -- actions
    def sigstop(self, slot: int, now: float) -> None:
        proc = self.procs[slot]
        others = {path: log_size(path) for path in self.logs.glob("*.log") if path != proc.log}
        proc.stops.append(Stop(now, set(proc.owned), others))
        proc.signal(signal.SIGSTOP)
        proc.stopped_until = now + self.rng.uniform(1.5, 2.0) * SESSION_MS / 1000
        self.tally.stops += 1

    def sigcont(self, proc: Proc, now: float) -> None:
        """Resume a stopped process, noting where the logs were."""
        stop = proc.stops[-1]
        stop.resumed = now
        stop.others_to = {path: log_size(path) for path in self.logs.glob("*.log")
                          if path != proc.log}  # a process started meanwhile too
        stop.own_from = log_size(proc.log)
        proc.signal(signal.SIGCONT)
        proc.stopped_until = None

    def sigkill(self, slot: int, now: float) -> None:
        proc = self.procs[slot]
        proc.signalled = "kill"
        proc.signal(signal.SIGKILL)
        proc.stopped_until = None
        self.tally.kills += 1
        self.restart_at[slot] = now + self.rng.uniform(0.5, 3.0)

    def sigterm(self, slot: int, now: float, then: str) -> None:
        """Clean stop; ``then``: "restart" (later), "retire" (scale in) or "final"."""
        proc = self.procs[slot]
        # No program handles a signal before its interpreter and imports are up (~0.7 s
        # here; `millpond run` catches one from then on): give it two seconds.
        time.sleep(max(0.0, min(2.0, proc.started + 2.0 - time.monotonic())))
        proc.signalled = "term"
        proc.term_deadline = now + TERM_EXIT_S
        proc.signal(signal.SIGTERM)
        if then == "restart":
            self.tally.terms += 1
            self.restart_at[slot] = now + TERM_EXIT_S + 1  # rescheduled once it has exited
        elif then == "retire":
            self.tally.scale_in += 1
            self.retired.add(slot)

    def after_start(self, slot: int, now: float) -> None:
        """Sometimes freeze a process soon after a start, while restores/rebalances run."""
        if self.rng.random() < 0.5:
            target = slot if self.rng.random() < 0.5 else None
            self.followups.append((now + self.rng.uniform(0.3, 2.5), target))

    def act(self, now: float) -> None:
        kind = self.rng.choices(["stop", "kill", "term", "out", "in"], [8, 4, 3, 2.5, 2.5])[0]
        awake, running = self.awake(), self.running()
        stopped = [s for s in running if self.procs[s].stopped_until is not None]
        # Keep a process awake besides the victim so someone takes its partitions over.
        if kind == "stop" and len(awake) >= 2 and len(stopped) < 2:
            self.sigstop(self.target(awake), now)
        elif kind == "kill" and len(running) >= 2 and len(awake) >= 1:
            victim = self.target(running, 0.7)
            if [s for s in awake if s != victim]:
                self.sigkill(victim, now)
        elif kind == "term" and len(awake) >= 2:
            self.sigterm(self.target(awake, 0.7), now, "restart")
        elif kind == "out" and self.active_slots() < 4:
            slot = self.add_slot()
            self.tally.scale_out += 1
            self.after_start(slot, now)
        elif kind == "in" and self.active_slots() > 2 and len(awake) >= 2:
            self.sigterm(self.target(awake, 0.7), now, "retire")

    def tick(self, now: float) -> None:
        """Resume, restart, run follow-up stops, and check every process's health."""
        for slot, proc in list(self.procs.items()):
            proc.follow_log()
            rc = proc.reap()
            if rc is not None:
                if proc.signalled is None:
                    self.fail(f"exited by itself with code {rc}", proc)
                    proc.signalled = "died"
                    self.restart_at[slot] = now + 1.0
                elif proc.signalled == "term":
                    if rc != 0:
                        self.fail(f"exit code {rc} after SIGTERM (expected 0)", proc)
                    proc.signalled = "termed"
                    if slot in self.restart_at:
                        self.restart_at[slot] = now + self.rng.uniform(0.5, 3.0)
                continue
            if proc.stopped_until is not None and now >= proc.stopped_until:
                self.sigcont(proc, now)
            if proc.signalled == "term" and now > proc.term_deadline:
                self.fail(f"still running {TERM_EXIT_S:.0f}s after SIGTERM", proc)
                proc.signal(signal.SIGKILL)
                proc.signalled = "kill"
        for slot, when in list(self.restart_at.items()):
            if now >= when and slot not in self.retired:
                self.start(slot)
                self.after_start(slot, now)
        due = [f for f in self.followups if f[0] <= now]
        self.followups = [f for f in self.followups if f[0] > now]
        for _, slot in due:
            stopped = [s for s in self.running() if self.procs[s].stopped_until is not None]
            awake = self.awake()
            if len(stopped) >= 2 or not awake:
                continue
            target = slot if slot in awake else self.rng.choice(awake)
            self.sigstop(target, now)
            self.tally.stops_after_start += 1

    def wake_all(self) -> None:
        now = time.monotonic()
        for proc in self.procs.values():
            if proc.stopped_until is not None and proc.alive:
                self.sigcont(proc, now)

    def stop_all(self) -> None:
        """SIGTERM every live process; each must exit 0 within TERM_EXIT_S."""
        self.restart_at.clear()
        now = time.monotonic()
        for slot in self.running():
            self.sigterm(slot, now, "final")
        deadline = now + TERM_EXIT_S + 5
        while time.monotonic() < deadline and any(p.alive for p in self.procs.values()):
            self.tick(time.monotonic())
            time.sleep(0.1)
        self.tick(time.monotonic())
        for proc in self.history:
            if proc.alive:  # tick() already reported it
                proc.popen.kill()
                proc.popen.wait(10)
            proc.reap()

    def kill_all(self) -> None:
        """Cleanup on any way out: nothing of ours keeps running."""
        for proc in self.history:
            if proc.alive:
                proc.signal(signal.SIGCONT)
                proc.popen.kill()
                proc.popen.wait(10)
            proc.reap()

    def log_counts(self) -> dict[str, int]:
        text = "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))
        return {"restores": text.count("ready: restored"),
                "restores_nonempty": len(re.findall(r"ready: restored [1-9]", text)),
                "lost_events": text.count("were lost to another member"),
                "tracebacks": text.count("Traceback")}


# ---- checks --------------------------------------------------------------------------------

def read_between(path: Path, start: int, end: int | None = None) -> str:
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read() if end is None else fh.read(max(0, end - start))
    return data.decode(errors="replace")


def assigned_to_others(stop: Stop, ends: Mapping[Path, int | None]) -> set[int]:
    """The partitions the other processes' logs say they were assigned after ``stop``
    (up to ``ends``: a log's size, or None for all of it)."""
    taken: set[int] = set()
    for path, end in ends.items():
        during = read_between(path, stop.others_from.get(path, 0), end)
        for m in ASSIGNED.finditer(during):
            taken |= {int(x) for x in re.findall(r"\d+", m.group(1))}
    return taken


def taken_over(proc: Proc, logs: Path) -> bool:
    """Another process was assigned some of the partitions ``proc`` held at its last stop,
    so far (the logs of processes started during the pause count too)."""
    stop = proc.stops[-1]
    others: dict[Path, int | None] = {path: None for path in logs.glob("*.log")
                                      if path != proc.log}
    return bool(stop.owned & assigned_to_others(stop, others))


def zombie_evidence(history: list[Proc]
                    ) -> tuple[list[float], list[str], list[str], list[str]]:
    """What the SIGSTOPs did, read from the logs: (pause of each resumed stop in s, the
    zombies, the stops that did not outlive the session timeout). A zombie is a stop of a
    process holding partitions during which another process was assigned some of them (its
    session expired and the group rebalanced without it) and after whose SIGCONT it logged
    their loss or its fence (it came back a zombie and was refused). A stop ended by a
    SIGKILL is neither. The fourth list: what each other resumed stop of a process holding
    partitions saw (why it was no zombie)."""
    pauses: list[float] = []
    others: list[str] = []
    zombies: list[str] = []
    short: list[str] = []
    for proc in history:
        for stop in proc.stops:
            if stop.resumed is None:
                continue
            pause = stop.resumed - stop.at
            pauses.append(pause)
            if pause <= SESSION_MS / 1000:
                short.append(f"{proc.name}: paused {pause:.1f} s, within the session timeout")
            if not stop.owned:
                continue
            taken = assigned_to_others(stop, stop.others_to)
            after = read_between(proc.log, stop.own_from)
            after = after.split("\n==== ", 1)[0]  # this incarnation only
            sign = next((s for s in ZOMBIE_SIGNS if s in after), None)
            seen = (f"{proc.name}: paused {pause:.1f} s holding {sorted(stop.owned)}; "
                    f"others took {sorted(taken & stop.owned)}; it logged {sign!r}")
            (zombies if taken & stop.owned and sign is not None else others).append(seen)
    return pauses, zombies, short, others


def per_partition_diff(state: dict[str, int], expected: dict[int, Counter[str]]
                       ) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(lost, duplicated, {partition: (lost, duplicated)}) of ``state`` against the reference."""
    by_part: dict[int, dict[str, int]] = defaultdict(dict)
    for user, value in state.items():
        by_part[user_partition(user)][user] = value
    out = {}
    for p in range(PARTITIONS):
        out[p] = state_diff(by_part.get(p, {}), expected.get(p, Counter()))
    return sum(v[0] for v in out.values()), sum(v[1] for v in out.values()), out


def output_diff(bootstrap: str, sink: str, positions: set[str],
                isolation: str = "read_committed") -> tuple[int, int]:
    """(missing, duplicated) records of the output read with ``isolation`` against the
    acked inputs (one record per input, keyed by its position)."""
    seen = Counter(msg.key().decode() for msg in read_topic(bootstrap, sink, isolation))
    missing = len(positions - set(seen))
    duplicated = sum(n - 1 for n in seen.values() if n > 1) + len(set(seen) - positions)
    return missing, duplicated


def final_run(config: Path, log: Path, timeout: float) -> tuple[int | None, str]:
    """One fresh `millpond run --bounded`; (exit code or None on timeout, log tail)."""
    with open(log, "wb") as fh:
        proc = subprocess.Popen([MILLPOND, "run", "--config", str(config), "--bounded"],
                                cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
        try:
            rc: int | None = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            rc = None
    return rc, tail(log)


def record_run(row: dict[str, Any]) -> None:
    line = json.dumps({k: v for k, v in row.items() if k not in ("failures", "examples")}
                      | {"failures": len(row["failures"])}, sort_keys=True)
    print(line)
    RUNS_LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(RUNS_LOG, "a") as fh:
        fh.write(line + "\n")


# ---- the chaos test --------------------------------------------------------------------------

def run_chaos(bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path, guarantee: str,
              seed: int, chaos_s: float, rate: float, backup: dict[str, Any] | None = None,
              ) -> dict[str, Any]:
    """Run the whole scenario; returns the measured row (failures under "failures").
    ``backup``: ``job.state.backup.*`` properties (state backups on)."""
    began = time.monotonic()
    rng = random.Random(seed)
    source, sink, job = topic_name("in"), topic_name("out"), topic_name("job")
    create_topic(bootstrap, source, PARTITIONS)
    extra: dict[str, Any] = dict(backup or {})
    # Every guarantee emits one output record per input: exactly-once's must be exact
    # read_committed, the others' are measured read_uncommitted (nothing lost; duplicates
    # counted and reported).
    create_topic(bootstrap, sink, PARTITIONS)
    extra["emit.stream"] = f"kafka.{sink}"
    n_conf = [0]

    def make_config(state: Path) -> Path:
        n_conf[0] += 1
        return write_properties(tmp_path / f"job-{n_conf[0]}.properties",
                                job_properties(bootstrap, job, source, state, guarantee, **extra))

    cluster = Cluster(tmp_path, make_config, rng)
    producer = InputProducer(bootstrap, source, rate, seed)
    try:
        for _ in range(3):
            cluster.add_slot()
        producer.start()
        now = time.monotonic()
        end = now + chaos_s if chaos_s > 0 else now + 8
        next_action = now + rng.uniform(2.0, 4.0) if chaos_s > 0 else float("inf")
        # The last stop: a process holding partitions is frozen until the end, so it wakes
        # as a zombie when the input has stopped and no later write of the new owner can
        # hide what it does. It waits for a busy owner and another awake process (15 s at
        # most), then for any owner and another awake process (60 s at most: on a loaded
        # machine a restarted process takes 10 s or more to be assigned partitions again).
        last_len = rng.uniform(1.5, 2.0) * SESSION_MS / 1000
        last_stop = end - last_len if chaos_s > 0 else float("inf")
        last_victim: Proc | None = None
        while (now := time.monotonic()) < end or last_stop < float("inf"):
            cluster.tick(now)
            if now >= last_stop:
                awake, owners = cluster.awake(), cluster.owners_awake()
                busy = cluster.busy(owners)
                ready = bool(owners) and len(awake) >= 2
                if (busy and ready) or (ready and now > last_stop + 15) or now > last_stop + 60:
                    if ready:
                        victim = cluster.rng.choice(busy or owners)
                        cluster.sigstop(victim, now)
                        cluster.procs[victim].stopped_until = float("inf")  # till the end
                        last_victim = cluster.procs[victim]
                    last_stop = float("inf")
                    end = now + last_len
                    next_action = end  # nothing else after it
            if now >= next_action:
                cluster.act(now)
                next_action = now + rng.uniform(1.0, 3.5)
            time.sleep(0.1)
        # The last stop wakes only once another process was assigned some of its partitions
        # (its session expired and the group rebalanced without it: a loaded machine can
        # take longer than the pause for that), so it comes back a zombie; bounded.
        if last_victim is not None and last_victim.alive:
            deadline = time.monotonic() + 60
            while not taken_over(last_victim, cluster.logs) and time.monotonic() < deadline:
                cluster.tick(time.monotonic())
                time.sleep(0.2)
        cluster.wake_all()
        # A little more input after the zombies wake: what they write lands between the
        # new owners' writes (effectively-once restores up to the owners' checkpoints), and
        # few of the keys they touch are written again before the input stops.
        settle = time.monotonic() + rng.uniform(0.5, 1.5)
        while (now := time.monotonic()) < settle:
            cluster.tick(now)
            time.sleep(0.1)
        producer.stop()
        settle = time.monotonic() + 4.0  # zombies finish acting, rebalances settle
        while (now := time.monotonic()) < settle:
            cluster.tick(now)
            time.sleep(0.1)
        cluster.stop_all()
    finally:
        cluster.kill_all()
        if producer.is_alive():
            producer._halt.set()
    chaos_wall = time.monotonic() - began
    cluster.save_reference(tmp_path / "reference.json", producer)
    counts = cluster.log_counts()
    pauses, zombies, short, not_zombies = zombie_evidence(cluster.history)

    final_conf = make_config(tmp_path / "state-final")
    rc, final_tail = final_run(final_conf, cluster.logs / "final.log", timeout=240)
    t = cluster.tally
    row: dict[str, Any] = {
        "test": "zombies", "seed": seed, "guarantee": guarantee, "chaos_s": chaos_s,
        "input": producer.acked, "stops": t.stops, "stops_after_start": t.stops_after_start,
        "kills": t.kills, "terms": t.terms, "scale_out": t.scale_out, "scale_in": t.scale_in,
        "restores": counts["restores"], "restores_nonempty": counts["restores_nonempty"],
        "lost_events": counts["lost_events"],
        "tracebacks": counts["tracebacks"], "final_rc": rc,
        "stops_resumed": len(pauses), "min_pause_s": round(min(pauses, default=0.0), 1),
        "zombies": len(zombies), "zombie_examples": zombies[:3],
    }
    failures = list(t.failures)
    failures += short
    if chaos_s > 0 and not zombies:
        failures.append(
            f"no zombie: of {t.stops} SIGSTOPs ({len(pauses)} resumed), none was of a process "
            "holding partitions that another process was assigned during the pause and that "
            f"logged one of {ZOMBIE_SIGNS} after its SIGCONT; the resumed stops of "
            f"processes holding partitions: {not_zombies or 'none'}")
    if counts["tracebacks"]:
        for proc in cluster.history:
            if any(f.startswith(f"{proc.name}:") for f in failures):
                continue  # its tail is already shown
            if "Traceback" in proc.log.read_text(errors="replace"):
                text = proc.log.read_text(errors="replace")
                at = text.index("Traceback")
                failures.append(f"{proc.name}: logged a traceback:\n{text[at:at + 2500]}")
                break
    if rc != 0:
        failures.append(f"final --bounded run exit code {rc}:\n{final_tail}")
        row.update(lost=None, duplicated=None)
    else:
        counts_state = dump_store(final_conf, "counts")
        sums_state = dump_store(final_conf, "sums")
        lost, dup, per_part = per_partition_diff(counts_state, producer.counts)
        sum_lost, sum_dup, _ = per_partition_diff(sums_state, producer.sums)
        row.update(lost=lost, duplicated=dup, sum_lost=sum_lost, sum_duplicated=sum_dup,
                   per_partition={p: v for p, v in per_part.items() if v != (0, 0)})
        wrong = []
        for p in range(PARTITIONS):
            for user in sorted(set(producer.counts[p]) | set(producer.sums[p])):
                want = (producer.counts[p][user], producer.sums[p][user])
                got = (counts_state.get(user, 0), sums_state.get(user, 0))
                if want != got:
                    wrong.append(f"{user} (partition {p}): count {got[0]}/{want[0]}, "
                                 f"sum {got[1]}/{want[1]}")
        row["users_wrong"] = len(wrong)
        row["examples"] = wrong[:8]
        isolation = "read_committed" if guarantee == "exactly-once" else "read_uncommitted"
        out_missing, out_dup = output_diff(bootstrap, sink, producer.positions, isolation)
        row.update(output_missing=out_missing, output_duplicated=out_dup,
                   output_isolation=isolation)
    row["snapshot_restores"] = sum(p.read_text(errors="replace").count("downloaded snapshot")
                                   for p in cluster.logs.glob("*.log"))
    row["wall_s"] = round(time.monotonic() - began, 1)
    row["chaos_wall_s"] = round(chaos_wall, 1)
    row["failures"] = failures
    return row


def check_row(row: dict[str, Any]) -> None:
    """State exact under every guarantee (at-least-once too: the fence makes it so); output
    nothing missing, and under exactly-once nothing duplicated read_committed (the others'
    duplicates are reported, not failures)."""
    problems = list(row["failures"])
    g = row["guarantee"]
    if row.get("lost") is not None:
        if row["lost"] or row["sum_lost"]:
            problems.append(f"lost {row['lost']} count updates, {row['sum_lost']} of sums "
                            f"(per partition (lost, dup): {row['per_partition']})")
        if row["duplicated"] or row["sum_duplicated"]:
            problems.append(f"duplicated {row['duplicated']} count updates, "
                            f"{row['sum_duplicated']} of sums ({g}: state must be exact; "
                            f"per partition (lost, dup): {row['per_partition']})")
        if row["output_missing"] or (g == "exactly-once" and row["output_duplicated"]):
            problems.append(f"output ({row['output_isolation']}): {row['output_missing']} "
                            f"missing, {row['output_duplicated']} duplicated records")
    if problems and row.get("examples"):
        problems.append(f"{row['users_wrong']} users differ (got/expected), e.g.:\n"
                        + "\n".join(row["examples"]))
    summary = {k: v for k, v in row.items() if k not in ("failures", "examples")}
    assert not problems, f"{summary}\n\n" + "\n\n".join(problems)


def _report_row(report: Callable[..., None], row: dict[str, Any], what: str) -> None:
    tried = (f"seed {row['seed']}, {row['input']:,} msgs live, {row['stops']} SIGSTOPs "
             f"({row['stops_after_start']} right after a start), {row['kills']} SIGKILLs, "
             f"{row['terms']} SIGTERMs, {row['scale_out']}+{row['scale_in']} scale out+in, "
             f"{row['restores']} task restores")
    tried += (f", {row['zombies']} zombies (paused {row['min_pause_s']} s or more, past the "
              f"{SESSION_MS / 1000:.0f} s session; partitions taken over; loss or fence logged)")
    if row.get("snapshot_restores"):
        tried += f"; {row['snapshot_restores']} store restores from an S3 snapshot"
    exactly = row["guarantee"] == "exactly-once"
    if row.get("lost") is None:
        lost: Any = "-"
        dup: Any = "-"
    else:
        lost = row["lost"] + row["output_missing"]
        dup = row["duplicated"] + (row["output_duplicated"] if exactly else 0)
    outcome = "FAIL" if row["failures"] or lost != 0 or dup != 0 else "exact"
    if row.get("lost") is not None and not exactly:
        outcome += (f"; output {row['output_isolation']}: {row['output_missing']} lost, "
                    f"{row['output_duplicated']} duplicated")
    report(f"{what} ({row['guarantee']})", tried, lost, dup, outcome)


@pytest.mark.timeout(900)
def test_zombies(zombie_case: tuple[str, int], full: bool, report: Callable[..., None],
                 kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path) -> None:
    """SIGSTOP > session timeout mixed with SIGKILL, SIGTERM and scaling: exact state."""
    guarantee, seed = zombie_case
    row = run_chaos(kafka_bootstrap, topic_name, tmp_path, guarantee, seed,
                    chaos_s=35.0 if full else 25.0, rate=RATE)
    record_run(row)
    _report_row(report, row, "zombies: SIGSTOP/KILL/TERM/scale")
    check_row(row)


@pytest.mark.timeout(900)
def test_zombies_with_backups(full: bool, report: Callable[..., None], kafka_bootstrap: str,
                              topic_name: Callable[[str], str], tmp_path: Path, s3: Any) -> None:
    """The same chaos (effectively-once, one seed) with both stores backed up to a real S3
    server every second: every process has a state dir of its own, so each partition
    that moves (rebalances, SIGKILLs, a scale-out) and the final process's every store
    come back from snapshots (at least one restore downloads one) plus the changelog
    tail, while uploads race kills, pauses and rebalances. Exact state."""
    guarantee = "effectively-once"
    backup = {**s3.properties(topic_name("job")), "job.state.backup.interval.ms": 1000}
    row = run_chaos(kafka_bootstrap, topic_name, tmp_path, guarantee, BACKUP_SEED,
                    chaos_s=35.0 if full else 25.0, rate=RATE, backup=backup)
    record_run({**row, "test": "zombies-backups"})
    _report_row(report, row, "zombies with backups, new state dirs")
    check_row(row)
    assert row["snapshot_restores"] > 0, "no restore started from a snapshot"


@pytest.mark.faults_full
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_no_chaos_baseline(guarantee: str, kafka_bootstrap: str, topic_name: Callable[[str], str],
                           tmp_path: Path) -> None:
    """The same harness without faults must be exact: proves the reference and the checks
    (part of `make faults` only)."""
    row = run_chaos(kafka_bootstrap, topic_name, tmp_path, guarantee, 7, chaos_s=0, rate=RATE)
    record_run({**row, "test": "zombies-baseline"})
    check_row(row)


# ---- a rebalance while a big store restores ------------------------------------------------

def seed_changelog(bootstrap: str, topic: str, records: int) -> dict[int, int]:
    """Write ``records`` distinct keys ``seed-<p>-<i>`` (count values) straight into the counts
    changelog, spread over the partitions; returns the last offset per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 500_000,
                         "enable.idempotence": True})
    last: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err.str())
        elif msg.offset() > last.get(msg.partition(), -1):
            last[msg.partition()] = msg.offset()

    for i in range(records):
        p = i % PARTITIONS
        while True:
            try:
                producer.produce(topic, str(i % 9 + 1).encode(), f"seed-{p}-{i}".encode(), p,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0 and not errors, errors[:3]
    return last


def seed_value(key: str) -> int:
    return int(key.rsplit("-", 1)[1]) % 9 + 1


def restore_events(path: Path) -> list[tuple[float, int, str, int]]:
    """(time, pid, event, partition) of the counts store's restores, from TimedRestoreListener."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        when, pid, event, store, partition, _ = line.split()
        if store == "counts":
            out.append((float(when), int(pid), event, int(partition)))
    return out


LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")


def pending_after(events: list[tuple[float, int, str, int]], pid: int, when: float
                  ) -> set[int]:
    """The partitions process ``pid`` restored after ``when`` without having finished
    restoring them before it, provided it had begun restoring before ``when`` (its restore
    phase was under way then)."""
    mine = [(at, event, partition) for at, who, event, partition in events if who == pid]
    if not any(at <= when and event == "start" for at, event, _ in mine):
        return set()
    done = {partition for at, event, partition in mine if at <= when and event == "end"}
    return {partition for at, event, partition in mine
            if at > when and event == "start" and partition not in done}


def first_logged(path: Path, needle: str) -> float | None:
    """Unix time of the first line of a `millpond run` log containing ``needle`` (from its
    logging timestamp, local time to the millisecond); None if no line does."""
    for line in path.read_text(errors="replace").splitlines():
        m = LOG_TIME.match(line)
        if m and needle in line:
            return (time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))
                    + int(m.group(2)) / 1000)
    return None


def restoring_at(events: list[tuple[float, int, str, int]], pid: int, when: float) -> set[int]:
    """The partitions process ``pid`` was restoring at ``when``: a restore started at or
    before it and not ended by then."""
    busy: set[int] = set()
    for at, who, event, partition in sorted(events):
        if who != pid or at > when:
            continue
        if event == "start":
            busy.add(partition)
        elif event == "end":
            busy.discard(partition)
    return busy


@pytest.mark.timeout(900)
def test_join_while_a_big_store_restores(
    full: bool, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """B joins while A restores a store of 300k (1M with --faults-full) records: the
    rebalance B's join makes (its first assignment, read from B's log) lands while A's
    restore listener says A is still restoring, A's restore finishes or restarts, partitions
    move to B (which restores them), nothing crashes, and the state is exact."""
    from millpond.changelog.checkpoint import Checkpoint, checkpoint_topic, task_name

    began = time.monotonic()
    records = 1_000_000 if full else 300_000
    source, job = topic_name("in"), topic_name("job")
    create_topic(kafka_bootstrap, source, PARTITIONS)
    for store in ("counts", "sums"):
        create_topic(kafka_bootstrap, f"{job}-{store}-changelog", PARTITIONS,
                     **{"cleanup.policy": "compact"})
    ckpt_topic = checkpoint_topic(job, "1")
    create_topic(kafka_bootstrap, ckpt_topic, PARTITIONS, **{"cleanup.policy": "compact"})
    last = seed_changelog(kafka_bootstrap, f"{job}-counts-changelog", records)
    ckpts = Producer({"bootstrap.servers": kafka_bootstrap})
    for p in range(PARTITIONS):
        ckpt = Checkpoint(task_name(p), p, {source: 0}, {"counts": last[p]})
        ckpts.produce(ckpt_topic, ckpt.to_bytes(), ckpt.task.encode(), p)
    assert ckpts.flush(30) == 0
    seeded_s = time.monotonic() - began

    events = tmp_path / "restore-events.txt"
    # A's restore lasts at least 8 x 1 s however fast this machine restores (2.3 s for all
    # 8 partitions on a quiet one, less than B takes to start and join)
    env = {"MILLPOND_TEST_EVENTS": str(events), "MILLPOND_TEST_RESTORE_START_DELAY": "1.0"}
    logs = tmp_path / "logs"
    logs.mkdir()

    def config(state: str, listener: bool = True) -> Path:
        extra = ({"task.restore.listener.class": "tests.jobs.two_stores.TimedRestoreListener"}
                 if listener else {})
        return write_properties(tmp_path / f"{state}.properties", job_properties(
            kafka_bootstrap, job, source, tmp_path / state, "effectively-once", **extra))

    producer = InputProducer(kafka_bootstrap, source, 1000.0, 99)
    procs: list[Proc] = []
    failures: list[str] = []
    try:
        producer.start()
        a = Proc.start("A", config("state-a"), logs / "a.log", env=env)
        procs.append(a)
        deadline = time.monotonic() + 120
        while (time.monotonic() < deadline and a.alive
               and not any(e[1] == a.popen.pid for e in restore_events(events))):
            time.sleep(0.05)
        assert a.alive and restore_events(events), f"A never began restoring:\n{tail(a.log)}"
        b = Proc.start("B", config("state-b"), logs / "b.log", env=env)
        procs.append(b)
        # Until both hold partitions, all 8 are covered, and nothing moved for 5 s.
        deadline, quiet_since, seen = time.monotonic() + 240, time.monotonic(), (-1, -1)
        while time.monotonic() < deadline:
            for proc in procs:
                proc.follow_log()
                if not proc.alive:
                    failures.append(f"{proc.name}: exited by itself with code "
                                    f"{proc.popen.returncode}\n{tail(proc.log)}")
            if failures:
                break
            sizes = (a.read_at, b.read_at)
            if sizes != seen:  # logs still moving: restores, rebalances
                seen, quiet_since = sizes, time.monotonic()
            covered = a.owned | b.owned == set(range(PARTITIONS))
            if a.owned and b.owned and covered and time.monotonic() - quiet_since > 5:
                break
            time.sleep(0.2)
        else:
            failures.append(f"no stable assignment within 240 s: A {sorted(a.owned)}, "
                            f"B {sorted(b.owned)}\n{tail(a.log)}\n{tail(b.log)}")
        producer.stop()
        time.sleep(2)
        for proc in procs:
            proc.signal(signal.SIGTERM)
        for proc in procs:
            try:
                rc = proc.popen.wait(TERM_EXIT_S)
            except subprocess.TimeoutExpired:
                rc = None
            if rc != 0 and not any(f.startswith(proc.name) for f in failures):
                failures.append(f"{proc.name}: exit code {rc} after SIGTERM\n{tail(proc.log)}")
    finally:
        for proc in procs:
            if proc.alive:
                proc.popen.kill()
                proc.popen.wait(10)
            proc.reap()
        if producer.is_alive():
            producer._halt.set()
    for proc in procs:
        if "Traceback" in proc.log.read_text(errors="replace"):
            failures.append(f"{proc.name} logged a traceback:\n{tail(proc.log)}")

    evs = restore_events(events)
    a_evs = [e for e in evs if e[1] == a.popen.pid]
    b_evs = [e for e in evs if e[1] == b.popen.pid]
    a_end = max((e[0] for e in a_evs if e[2] == "end"), default=float("inf"))
    b_joined = first_logged(b.log, "assigned partitions")  # the rebalance that took B in
    # A's restore phase was under way when B joined: a partition being restored then, or
    # one A had not finished restoring and restored after (A restores its tasks one by
    # one: the join can land between two of them, which interrupts the phase all the same)
    a_busy = (restoring_at(evs, a.popen.pid, b_joined) | pending_after(evs, a.popen.pid, b_joined)
              if b_joined is not None else set())
    row: dict[str, Any] = {
        "test": "join-during-restore", "records": records, "input": producer.acked,
        "seeded_s": round(seeded_s, 1),
        "a_restores": sum(e[2] == "end" for e in a_evs),
        "b_restores": sum(e[2] == "end" for e in b_evs),
        "b_joined_before_a_restored_s": (round(a_end - b_joined, 1)
                                         if b_joined is not None else None),
        "a_restoring_when_b_joined": sorted(a_busy),
        "a_partitions_at_end": sorted(a.owned), "b_partitions_at_end": sorted(b.owned),
    }
    final_conf = config("state-final", listener=False)
    rc, final_tail = final_run(final_conf, logs / "final.log", timeout=600)
    if rc != 0:
        failures.append(f"final --bounded run exit code {rc}:\n{final_tail}")
    else:
        counts_state = dump_store(final_conf, "counts")
        sums_state = dump_store(final_conf, "sums")
        seeds = {k: v for k, v in counts_state.items() if k.startswith("seed-")}
        users = {k: v for k, v in counts_state.items() if not k.startswith("seed-")}
        seed_wrong = sum(seed_value(k) != v for k, v in seeds.items())
        lost, dup, _ = per_partition_diff(users, producer.counts)
        sum_lost, sum_dup, _ = per_partition_diff(sums_state, producer.sums)
        row.update(seed_keys=len(seeds), seed_wrong=seed_wrong, lost=lost, duplicated=dup,
                   sum_lost=sum_lost, sum_duplicated=sum_dup)
        if len(seeds) != records or seed_wrong:
            failures.append(f"seeded keys: {len(seeds)} of {records} present, {seed_wrong} wrong")
        if lost or dup or sum_lost or sum_dup:
            failures.append(f"input: lost {lost}, duplicated {dup} count updates "
                            f"(sums: lost {sum_lost}, duplicated {sum_dup})")
    row["wall_s"] = round(time.monotonic() - began, 1)
    record_run(row | {"failures": failures})
    report("join during a restore (effectively-once)",
           f"B joins (its log) {row['b_joined_before_a_restored_s']}s before A finished "
           f"restoring {records:,} changelog records, while A restored (or had yet to) partitions "
           f"{sorted(a_busy)}; {producer.acked:,} msgs live",
           row.get("lost", "-"), row.get("duplicated", "-"),
           "FAIL" if failures or not a_busy else "exact")
    assert b_joined is not None, f"B's log has no assignment:\n{tail(b.log)}"
    assert a_busy, (f"B joined (first assignment in its log at {b_joined:.3f}) while A was "
                    f"restoring nothing; A's restore events: {a_evs}")
    assert not failures, f"{row}\n\n" + "\n\n".join(failures)

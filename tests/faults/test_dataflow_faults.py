"""A dataflow under faults: ``filter -> key_by -> count -> to`` run by 2-3 processes at once.

The app (``app.class``, written to tmp_path) keeps the views of pages that do not end in 0,
re-keys them by page through its internal topic (written in each task's transaction, read
``read_committed``) and counts them per page. Three `millpond run` processes of the one job
share its 4 tasks through the consumer group, each with a state directory of its own, while
a producer thread writes views at a steady rate (the reference: the views the broker
acknowledged). Each round of the seeded schedule:

1. SIGKILL a process holding tasks at a random moment (0-1 s) after a commit moved one of its
   tasks; restart it 0.5-2 s later. Proven mid-stream: input committed, but not all of it,
   and the killed process's tasks had input left.
2. SIGSTOP a process holding tasks; SIGCONT it only once every one of its tasks was opened by
   another process and committed progress there: it resumes as a zombie and must log that
   its tasks were lost or that its transaction was aborted (fenced), and keep running.
3. SIGKILL a random process at a random moment (it may be opening tasks); restart it.

The chaos processes spend 2 ms per view, so faults land mid-batch. The input is live rather
than produced up front: with a backlog, a task reads its part of the internal topic only once
its source backlog is drained (see the note at ``RATE``), and the counts would be made by the
final run instead of under the faults. Then the input stops, every process is SIGTERMed (each
must exit 0), and a clean ``--bounded`` run on a fresh state directory restores the 4 stores
from their changelogs (every task had counted under the faults) and processes to the end.

Checks: the count store equals the input's page counts exactly (under ``effectively-once``
and ``exactly-once``); no task's committed checkpoint ever goes back (no zombie commit got
through); the internal topic holds each counted view once read_committed, re-keyed (key = the
page, partition = the job's partitioner of it), nothing the filter dropped (the records of
transactions a fault cut short are reported: only read_uncommitted shows them); the output holds
every ``(page, n)`` update, each exactly once read_committed under ``exactly-once`` (under
``effectively-once`` none is lost, repeats are reported). No process exits by itself or logs
a traceback.

`make test-faults` runs one round per guarantee; --faults-full runs three rounds on two seeds
per guarantee.
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from millpond.partitioner import murmur2_partition
from tests.kafka_util import (
    MILLPOND,
    REPO,
    checkpoint_history,
    count_output_diff,
    create_topic,
    dump_store,
    read_topic,
    ready_lines,
    run_job,
    state_diff,
    write_properties,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
PROCESSES = 3
SESSION_MS = 6000  # the broker's group.min.session.timeout.ms: a pause outlasts it
PAGES = 24  # /p0 .. /p23; the app drops /p0, /p10 and /p20
USERS = 400
DELAY_S = "0.002"  # per view, in the chaos processes only (the final run is not slowed)
# Views per second, well below what the processes can do, so each task keeps up with its
# source and counts as it goes. (A task's source backlog starves its internal partition: the
# group consumer hands out the source records it prefetched first, so a key_by's downstream
# operators run only once the source is drained. Measured with 3,000 views per partition
# produced up front: every task's committed internal offset stayed 0 until its source
# offset reached the end, and most of the counting fell to the final run.)
RATE = 400.0
WAIT_S = 90.0  # bound of every wait on the job
GUARANTEES = ["effectively-once", "exactly-once"]
SEEDS = {"effectively-once": 4101, "exactly-once": 4202}

APP = """\
import os
import time

from millpond.streams import App

DELAY = float(os.environ.get("DATAFLOW_FAULTS_DELAY_S") or 0)


def wanted(view):
    if DELAY:
        time.sleep(DELAY)  # the chaos processes are slowed: faults land mid-batch
    return not view["page"].endswith("0")


app = App()
(app.source({source!r}).filter(wanted)
 .key_by("by-page", lambda view: view["page"]).count("page-counts").to({out!r}))
"""

OWNERSHIP = re.compile(r"(assigned partitions|revoking partitions|partitions) \[([\d, ]*)\]")


def _counted(page: str) -> bool:
    return not page.endswith("0")


# ---- the input ------------------------------------------------------------------------------

class Views(threading.Thread):
    """Produces page views at ``rate`` per second until stopped; the reference holds only
    the views the broker acknowledged: per page the views the app counts, per id the page
    of a counted view."""

    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.rate = topic, rate
        self.rng = random.Random(seed)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True, "acks": "all"})
        self.expected: Counter[str] = Counter()
        self.counted: dict[int, str] = {}  # view id -> page, for the views the app counts
        self.acked = 0
        self.errors: list[str] = []
        self.sent = 0
        self._halt = threading.Event()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err.str())
            return
        view = json.loads(msg.value())
        if _counted(view["page"]):
            self.expected[view["page"]] += 1
            self.counted[view["i"]] = view["page"]
        self.acked += 1

    def run(self) -> None:
        began = time.monotonic()
        while not self._halt.is_set():
            due = int((time.monotonic() - began) * self.rate)
            while self.sent < due:
                p = self.sent % PARTITIONS
                user = f"user-{self.rng.randrange(USERS // PARTITIONS) * PARTITIONS + p}"
                view = {"user_id": user, "page": f"/p{self.rng.randrange(PAGES)}",
                        "i": self.sent}
                self.producer.produce(self.topic, json.dumps(view), user.encode(), p,
                                      on_delivery=self._on_delivery)
                self.sent += 1
            self.producer.poll(0.02)

    def stop(self) -> None:
        """Stop producing and wait for every delivery report."""
        self._halt.set()
        self.join(30)
        assert not self.is_alive(), "the view producer did not stop"
        assert self.producer.flush(60) == 0, "views left unacknowledged"
        assert not self.errors, f"view delivery errors: {self.errors[:3]}"


# ---- the processes --------------------------------------------------------------------------

@dataclass
class Member:
    """One incarnation of a `millpond run` process of the job, its output in ``log``."""

    name: str
    slot: int
    log: Path
    popen: subprocess.Popen[bytes]
    signalled: str | None = None  # "kill", "stop" (until SIGCONT) or "term"

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def owned(self) -> set[int]:
        """The partitions it holds, as its log's assign, revoke and lost lines say."""
        owned: set[int] = set()
        for m in OWNERSHIP.finditer(self.text()):
            parts = {int(x) for x in re.findall(r"\d+", m.group(2))}
            owned = owned | parts if m.group(1) == "assigned partitions" else owned - parts
        return owned

    def tail(self, chars: int = 2500) -> str:
        return f"--- tail of {self.log.name} ---\n{self.text()[-chars:]}"


@dataclass
class Tally:
    kills: list[dict[str, Any]] = field(default_factory=list)
    stops: list[dict[str, Any]] = field(default_factory=list)


class Job:
    """The job's processes: PROCESSES slots, each with a state dir of its own. ``sources``:
    the job's input topics (each task's progress: its committed offsets summed over them);
    ``internal``: its key_by's internal topic, if it has one."""

    def __init__(self, tmp: Path, config: Callable[[str], Path], bootstrap: str, job: str,
                 sources: tuple[str, ...], internal: str | None) -> None:
        self.config, self.bootstrap, self.job = config, bootstrap, job
        self.sources, self.internal = sources, internal
        self.offsets = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{job}-ends"})
        self.logs = tmp / "logs"
        self.logs.mkdir()
        self.slots = {slot: config(f"state-{slot}") for slot in range(PROCESSES)}
        self.members: dict[int, Member] = {}
        self.history: list[Member] = []
        self.tally = Tally()

    def start(self, slot: int) -> Member:
        name = f"p{slot}.{len(self.history)}"
        log = self.logs / f"{name}.log"
        with open(log, "wb") as fh:
            popen = subprocess.Popen(
                [MILLPOND, "run", "--config", str(self.slots[slot])], cwd=REPO, stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "DATAFLOW_FAULTS_DELAY_S": DELAY_S})
        member = self.members[slot] = Member(name, slot, log, popen)
        self.history.append(member)
        return member

    def check(self) -> None:
        """Every process we did not signal is still running."""
        for m in self.members.values():
            if m.signalled is None and not m.alive:
                raise AssertionError(f"{m.name} exited by itself with code "
                                     f"{m.popen.returncode}\n{m.tail()}")

    def wait(self, what: str, ok: Callable[[], Any], timeout: float = WAIT_S) -> Any:
        """Poll ``ok()`` until it returns something true (bounded); fail naming ``what``."""
        deadline = time.monotonic() + timeout
        while not (got := ok()):
            self.check()
            if time.monotonic() > deadline:
                tails = "\n".join(m.tail(1500) for m in self.members.values())
                raise AssertionError(f"{what}: not within {timeout:.0f} s\n{tails}")
            time.sleep(0.2)
        return got

    def checkpoints(self) -> dict[int, dict[str, int]]:
        """Each task's last committed input offsets (none yet while the job's checkpoint
        topic is being created)."""
        try:
            history = checkpoint_history(self.bootstrap, self.job)
        except (KafkaException, KeyError, AssertionError):
            return {}
        return {int(task.rsplit("-", 1)[1]): offs[-1] for task, offs in history.items()}

    def progress(self, inputs: dict[str, int]) -> int:
        """A task's committed offsets (``inputs``) summed over the sources."""
        return sum(inputs.get(source, 0) for source in self.sources)

    def committed(self) -> dict[int, int]:
        """Each task's last committed offsets of the sources (summed)."""
        return {p: self.progress(inputs) for p, inputs in self.checkpoints().items()}

    def ends(self) -> dict[int, int]:
        """Each partition's end offsets of the sources (summed)."""
        return {p: sum(self.offsets.get_watermark_offsets(TopicPartition(source, p),
                                                          timeout=30)[1]
                       for source in self.sources)
                for p in range(PARTITIONS)}

    def all_rekeyed(self) -> bool:
        """Every task has committed records of the internal topic."""
        return all(self.checkpoints().get(p, {}).get(self.internal or "", 0) > 0
                   for p in range(PARTITIONS))

    def awake(self) -> list[Member]:
        return [m for m in self.members.values() if m.alive and m.signalled is None]

    def owners(self) -> list[Member]:
        return [m for m in self.awake() if m.owned()]

    def logs_text(self) -> str:
        return "".join(m.text() for m in self.history)

    def up(self, member: Member) -> bool:
        """It logged a line: its signal handlers are set, a SIGTERM stops it cleanly."""
        return " INFO " in member.text()

    # ---- faults -------------------------------------------------------------------------
    def kill(self, member: Member, when: str) -> None:
        """SIGKILL ``member``; record where the job's commits and the input stood then."""
        owned = member.owned()
        member.signalled = "kill"
        member.popen.kill()
        member.popen.wait(30)
        ckpts = self.checkpoints()  # the dead process's tasks commit nothing more
        ends = self.ends()
        committed = {p: self.progress(inputs) for p, inputs in ckpts.items()}
        self.tally.kills.append({
            "when": when, "committed": sum(committed.values()), "total": sum(ends.values()),
            "owned": sorted(owned),
            "left": sorted(p for p in owned if committed.get(p, 0) < ends[p]),
            # re-keyed records its tasks had taken and committed
            "counted": sum(ckpts.get(p, {}).get(self.internal, 0) for p in owned)
            if self.internal else 0})

    def restart_later(self, slot: int, rng: random.Random) -> None:
        time.sleep(rng.uniform(0.5, 2.0))  # a random moment, not a wait
        self.check()
        self.start(slot)

    def kill_after_commit(self, rng: random.Random) -> None:
        """SIGKILL a process holding tasks 0-1 s after a commit moved one of them."""
        victim = rng.choice(self.wait("a process holding tasks", self.owners))
        before = self.committed()
        self.wait(f"a commit of {victim.name}'s tasks {sorted(victim.owned())}", lambda: any(
            off > before.get(p, 0) for p, off in self.committed().items()
            if p in victim.owned()))
        time.sleep(rng.uniform(0.0, 1.0))  # a random moment after that commit
        self.check()
        self.kill(victim, "after a commit")
        self.restart_later(victim.slot, rng)

    def kill_anytime(self, rng: random.Random) -> None:
        """SIGKILL a random process at a random moment (starting, opening tasks or
        processing)."""
        time.sleep(rng.uniform(0.3, 3.0))  # a random moment
        self.check()
        victim = rng.choice(self.awake())
        self.kill(victim, "anytime")
        self.restart_later(victim.slot, rng)

    def pause_until_fenced(self, rng: random.Random) -> None:
        """SIGSTOP a process holding tasks; SIGCONT it once each of its tasks was opened by
        another process and committed progress there; it must then say it lost them or
        that its transaction was aborted, and keep running."""
        victim = rng.choice(self.wait(
            "a process holding tasks beside another one awake",
            lambda: [m for m in self.owners() if len(self.awake()) >= 2]))
        owned = victim.owned()
        seen = {m.name: len(m.text()) for m in self.members.values()}
        victim.signalled = "stop"
        victim.popen.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()

        def taken_over() -> dict[int, int]:
            """partition -> the input offset its new owner resumed at, once all moved."""
            resumed: dict[int, int] = {}
            for m in self.members.values():
                if m is victim or not m.alive:
                    continue
                for task, _, inputs in ready_lines(m.text()[seen.get(m.name, 0):]):
                    resumed[int(task.rsplit("-", 1)[1])] = self.progress(inputs)
            return resumed if owned <= set(resumed) else {}

        resumed = self.wait(f"{victim.name}'s tasks {sorted(owned)} opened elsewhere",
                            taken_over)
        self.wait(f"progress committed on {sorted(owned)} by their new owners", lambda: all(
            self.committed().get(p, 0) > resumed[p] for p in owned))
        paused_s = time.monotonic() - stopped
        at = len(victim.text())
        victim.popen.send_signal(signal.SIGCONT)
        victim.signalled = None

        def verdict() -> str | None:
            text = victim.text()[at:]
            fenced = [p for p in owned if f"transaction of task partition-{p} aborted" in text]
            lost = [int(x) for m in re.finditer(r"partitions \[([\d, ]*)\] were lost", text)
                    for x in re.findall(r"\d+", m.group(1))]
            if fenced:
                return "fenced"
            if set(lost) & owned:
                return "lost"
            return None

        outcome = self.wait(f"{victim.name} resumed as a zombie: its tasks lost or fenced",
                            verdict)
        self.tally.stops.append({"paused_s": round(paused_s, 1), "owned": sorted(owned),
                                 "outcome": outcome})

    def stop_all(self) -> None:
        """SIGCONT and SIGTERM every live process; each must exit 0."""
        for m in self.members.values():
            if m.alive:
                m.popen.send_signal(signal.SIGCONT)
                self.wait(f"{m.name} started", lambda m=m: self.up(m) or not m.alive)
        self.check()
        for m in self.members.values():
            if m.alive:
                m.signalled = "term"
                m.popen.send_signal(signal.SIGTERM)
        for m in self.members.values():
            if m.signalled == "term":
                try:
                    rc = m.popen.wait(60)
                except subprocess.TimeoutExpired:
                    rc = None
                assert rc == 0, f"{m.name}: exit code {rc} after SIGTERM\n{m.tail()}"

    def kill_all(self) -> None:
        self.offsets.close()
        for m in self.history:
            if m.alive:
                m.popen.send_signal(signal.SIGCONT)
                m.popen.kill()
                m.popen.wait(30)


# ---- checks ---------------------------------------------------------------------------------

def check_monotone(bootstrap: str, job: str) -> int:
    """No task's committed input offsets ever go back (a zombie's commit after its task's
    new owner's would); returns the number of checkpoints."""
    history = checkpoint_history(bootstrap, job)
    for task, offsets in history.items():
        for topic in {t for o in offsets for t in o}:
            seq = [o.get(topic, 0) for o in offsets]
            assert seq == sorted(seq), f"task {task}'s committed {topic} offsets go back: {seq}"
    return sum(len(o) for o in history.values())


def check_internal(bootstrap: str, topic: str, counted: dict[int, str]) -> tuple[int, int, int]:
    """The internal topic, read read_committed, holds re-keyed views (key: the page; its
    partition: the job's partitioner of the key), only counted ones, each at most once, and
    all of them unless the job purged consumed records. Returns (records, purged, aborted:
    the records only read_uncommitted shows, written by transactions a fault cut short)."""
    ids: Counter[int] = Counter()
    committed = read_topic(bootstrap, topic, "read_committed")
    for msg in committed:
        view = json.loads(msg.value())
        assert json.loads(msg.key()) == view["page"], (msg.key(), view)
        assert msg.partition() == murmur2_partition(msg.key(), PARTITIONS), (
            f"{msg.key()!r} in partition {msg.partition()}")
        assert counted.get(view["i"]) == view["page"], f"not a counted view: {view}"
        ids[view["i"]] += 1
    twice = [i for i, n in ids.items() if n > 1]
    assert not twice, f"views re-keyed more than once (read_committed): {twice[:10]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dataflow-faults-lows"})
    try:
        purged = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0]
                     for p in range(PARTITIONS))
    finally:
        consumer.close()
    if purged == 0:
        assert set(ids) == set(counted), (
            f"{len(set(counted) - set(ids))} counted views missing from {topic}")
    aborted = len(read_topic(bootstrap, topic, "read_uncommitted")) - len(committed)
    return len(ids), purged, aborted


def committed_after(bootstrap: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
    """partition -> committed records of ``topic`` at or after ``offsets[partition]`` (read
    read_committed to each partition's end), for the partitions that have any."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-after",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, offsets.get(p, 0)) for p in range(PARTITIONS)])
    found: Counter[int] = Counter()
    remaining = set(range(PARTITIONS))
    deadline = time.monotonic() + 60
    try:
        while remaining and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                remaining.discard(msg.partition())
            else:
                found[msg.partition()] += 1
    finally:
        consumer.close()
    assert not remaining, f"did not reach the end of {topic} partitions {remaining}"
    return dict(found)


def run_dataflow_chaos(guarantee: str, seed: int, rounds: int, report: Callable[..., None], bootstrap: str,
                       topic_name: Callable[[str], str], tmp_path: Path) -> None:
    began = time.monotonic()
    rng = random.Random(seed)
    source, out, job = topic_name("views"), topic_name("out"), topic_name("job")
    for topic in (source, out):
        create_topic(bootstrap, topic, PARTITIONS)
    (tmp_path / "dataflow_faults_app.py").write_text(APP.format(source=source, out=out))

    def config(state: str) -> Path:
        return write_properties(tmp_path / f"{state}.properties", {
            "job.name": job,
            "app.class": "dataflow_faults_app:app",
            "task.processing.guarantee": guarantee,
            "task.commit.ms": 200,
            "systems.kafka.bootstrap.servers": bootstrap,
            "systems.kafka.samza.key.serde": "string",
            "systems.kafka.samza.msg.serde": "json",
            "systems.kafka.consumer.session.timeout.ms": SESSION_MS,
            "systems.kafka.consumer.heartbeat.interval.ms": 1000,
            "job.logged.store.base.dir": str(tmp_path / state),
        })

    views = Views(bootstrap, source, RATE, seed)
    cluster = Job(tmp_path, config, bootstrap, job, (source,), f"{job}-1-by-page-repartition")
    try:
        views.start()
        for slot in range(PROCESSES):
            cluster.start(slot)
        cluster.wait("every task open, and a commit", lambda: (
            set().union(*(m.owned() for m in cluster.awake())) == set(range(PARTITIONS))
            and sum(cluster.committed().values()) > 0))
        for _ in range(rounds):
            cluster.kill_after_commit(rng)
            cluster.pause_until_fenced(rng)
            cluster.kill_anytime(rng)
        # A task that moved catches up on its source before it reads re-keyed views (see
        # RATE): until every task has counted some, so the stores hold the chaos's counts.
        cluster.wait("every task counting re-keyed views", cluster.all_rekeyed)
        views.stop()
        cluster.stop_all()
    finally:
        cluster.kill_all()
        views._halt.set()
    chaos_s = time.monotonic() - began
    text = cluster.logs_text()
    assert "Traceback" not in text, text[text.index("Traceback"):][:3000]

    final_conf = config("state-final")  # a fresh state dir: every store from its changelog
    final = run_job(final_conf, "--bounded", timeout=240)
    assert final.returncode == 0, final.stderr[-3000:]
    resumed = ready_lines(final.stderr)
    assert sorted(t for t, _, _ in resumed) == [f"partition-{p}" for p in range(PARTITIONS)], (
        final.stderr[-3000:])
    # Every task had counted under the faults: each resumes past re-keyed views with a count
    # store restored from its changelog.
    internal = f"{job}-1-by-page-repartition"
    for task, restored, inputs in resumed:
        assert inputs.get(internal, 0) > 0 and restored > 0, (
            f"{task} counted nothing before the final run: {inputs}, {restored} restored")
    final_from = sum(inputs[source] for _, _, inputs in resumed)

    t = cluster.tally
    first = t.kills[0]
    # Every SIGKILL landed mid-stream: input committed, but not all of it, and the killed
    # process's tasks had input left.
    for kill in t.kills:
        assert 0 < kill["committed"] < kill["total"], f"a kill was not mid-stream: {kill}"
    for kill in t.kills:
        assert kill["when"] == "anytime" or kill["left"], f"the victim had no input left: {kill}"
    checkpoints = check_monotone(bootstrap, job)
    rekeyed, purged, aborted = check_internal(bootstrap, internal, views.counted)

    # The final run read every partition of the internal topic to its end: no committed
    # re-keyed view lies beyond the offsets its last checkpoint holds.
    last = {int(task.rsplit("-", 1)[1]): offs[-1].get(internal, 0)
            for task, offs in checkpoint_history(bootstrap, job).items()}
    unread = committed_after(bootstrap, internal, last)
    lost, duplicated = state_diff(dump_store(final_conf, "page-counts"), views.expected)
    isolation = "read_committed" if guarantee == "exactly-once" else "read_uncommitted"
    out_lost, out_dup = count_output_diff(bootstrap, out, views.expected, isolation)
    stops = Counter(s["outcome"] for s in t.stops)
    pauses = ", ".join(f"{s['paused_s']}" for s in t.stops)
    tried = (f"seed {seed}, {views.acked:,} views live over {PROCESSES} processes, "
             f"{len(t.kills)} SIGKILLs (the first at {first['committed']:,}/{first['total']:,} "
             f"views committed, its tasks had counted {first['counted']:,} re-keyed ones), "
             f"{len(t.stops)} SIGSTOPs of {pauses} s (zombies: "
             f"{stops['fenced']} fenced, {stops['lost']} lost their tasks), "
             f"{text.count(' ready: restored ')} task opens, {checkpoints} checkpoints never "
             f"going back; internal topic: {rekeyed:,} re-keyed views once each read_committed "
             f"({purged} purged, {aborted} aborted ones read_uncommitted); {chaos_s:.0f} s "
             f"of chaos; the final run resumed at {final_from:,} views")
    fault = f"dataflow filter/key_by/count/to: SIGKILL + SIGSTOP ({guarantee})"
    if guarantee == "exactly-once":
        _, repeats = count_output_diff(bootstrap, out, views.expected, "read_uncommitted")
        report(fault, tried, lost + out_lost, duplicated + out_dup,
               f"exact; output exactly once read_committed ({repeats} aborted repeats "
               "read_uncommitted)" if lost + out_lost + duplicated + out_dup == 0 else "DIFF")
    else:
        report(fault, tried, lost, duplicated,
               f"{'exact' if lost == duplicated == 0 else 'DIFF'}; output read_uncommitted: "
               f"{out_lost} lost, {out_dup} repeated")
    assert not unread, (f"the final --bounded run ended with re-keyed views unread (partition: "
                        f"records after its checkpoint) {unread}; state: {lost} lost, "
                        f"{duplicated} duplicated")
    assert (lost, duplicated) == (0, 0), f"state: {lost} lost, {duplicated} duplicated"
    assert out_lost == 0, f"output: {out_lost} (page, n) updates missing"
    if guarantee == "exactly-once":
        assert out_dup == 0, f"output: {out_dup} duplicated (page, n) updates read_committed"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_dataflow_sigkills_and_zombies(
    guarantee: str, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One round: a SIGKILL after a commit, a SIGSTOP until the tasks moved (a zombie), a
    SIGKILL at a random moment; exact state (and output under exactly-once)."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the app's module, for every command
    run_dataflow_chaos(guarantee, SEEDS[guarantee], 1, report, kafka_bootstrap, topic_name,
                       tmp_path)


@pytest.mark.faults_full
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("guarantee", GUARANTEES)
def test_dataflow_sigkills_and_zombies_long(
    guarantee: str, seed: int, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three rounds per seed (part of `make faults` only)."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    run_dataflow_chaos(guarantee, SEEDS[guarantee] + seed, 3, report, kafka_bootstrap,
                       topic_name, tmp_path)

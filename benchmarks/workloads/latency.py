"""The ``latency`` workload (issue #39): end-to-end latency of a keyed count at a fixed input
rate.

For each row (system, guarantee, commit interval) and each rate of ``--latency-rates``, on
an input and an output topic of its own (``--partitions`` each):

1. the system's keyed count starts, unbounded, reading its input from the beginning: for
   every input message it updates the user's count in its state and sends ``{"user",
   "count", "ts_ms", "seq"}`` to the output topic under the user. The systems (SYSTEMS,
   picked by ``--systems``; the floor always):

   - ``floor``: benchmarks/latency_floor.py, a bare confluent-kafka loop (at-least-once);
   - ``millpond``: ``benchmarks.jobs.LatencyCounter`` (a StreamTask, ``counts`` store)
     under ``millpond run``;
   - ``millpond-dataflow``: the dataflow ``benchmarks.jobs:latency_app``,
     ``source(input).stateful_map("counts", ...).to(output)``, under ``millpond run``;
   - ``quix``: Quix Streams, ``sdf.apply(count, stateful=True).to_topic(output)``
     (benchmarks/peers/quix_count.py), at-least-once or exactly-once;
   - ``bytewax``: Bytewax 0.21, Kafka input -> ``stateful_map`` -> Kafka output, recovery
     on with an epoch per commit interval (benchmarks/peers/bytewax_count.py);
   - ``pathway``: Pathway 0.33, ``kafka.read`` (streaming, PATHWAY_AUTOCOMMIT_MS
     minibatches) -> ``groupby(user).reduce(count, max seq, max ts_ms)`` ->
     ``kafka.write`` (JSON), persistence on with a snapshot per commit interval
     (benchmarks/peers/pathway_count.py). Its output is an update stream: a key's new row
     (``"diff": 1``) and the retraction of its previous one (``"diff": -1``, an older
     seq); the reader counts only the insertions of this system (RETRACTING).

   A row whose guarantee a system lacks is left out of its plan (GUARANTEES: Quix has no
   effectively-once; Bytewax's and Pathway's Kafka outputs are not transactional, so only
   at-least-once); a peer runs from its own virtualenv (systems.ensure_peer, installed
   unless ``--no-install``);
2. a reader of the output topic starts (``read_committed`` for transactional outputs, i.e.
   exactly-once, ``read_uncommitted`` otherwise) and notes, for every record, when it saw it;
3. probes, one message every PROBE_EVERY_S, go in until the reader sees the first output:
   the job is up and has processed a message, so its start-up is not measured;
4. a paced producer (confluent-kafka, ``linger.ms`` LINGER_MS, idempotent) writes
   ``{"user_id", "seq", "ts_ms"}`` at the row's rate for ``--latency-warmup-s`` +
   ``--latency-seconds``, ``ts_ms`` being the wall clock (ms) of each ``produce`` call; users
   are ``--latency-users`` keys in the page views' interleaved walk, partitioned by user
   number as the count's input is;
5. once every message produced has an output (or none came for DRAIN_S + 3 commit
   intervals), the job is stopped (SIGTERM, bounded; each peer script ends its run on it
   and writes its report) and the reader with it.

Latency is (when the reader saw an output record) - its ``ts_ms``, for the first sighting of
each paced message after the warm-up's (the first ``--latency-warmup-s`` x rate): p50, p99,
p99.9 and max. Every seq
produced (probes included) must appear in the output, at least once, and under exactly-once
exactly once; else the run is WRONG. Beside them: the rate the producer achieved and how far
it fell behind its schedule, the job's CPU and peak RSS, and the load average, CPU steal
and CPU pressure (the kernel's PSI: time a runnable task waited for a CPU) while it ran.

With ``--keep``, each run's outputs are written to ``<work-dir>/<tag>-samples.csv`` (seq,
input ``ts_ms``, the output's Kafka timestamp, i.e. when the job produced it, and when the
reader saw it), and ``MILLPOND_BENCH_JOB_LOG_LEVEL=DEBUG`` makes the job log each commit's
phase times: where a slow output was held. ``MILLPOND_BENCH_JOB_PROPS="k=v;k=v"`` adds
properties to millpond's job files (an A/B of a setting, e.g.
``systems.kafka.producer.linger.ms=5``).

A system is a function in SYSTEMS that starts its job and returns a :class:`Job`; a peer
(Quix Streams, Bytewax, Pathway) is a :class:`PeerJob`, its rows run through the same
producer, reader and checks.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from benchmarks import data, systems
from benchmarks.common import (
    MILLPOND,
    Child,
    Running,
    load_average,
    start_child,
    summarize,
    venv_python,
)
from benchmarks.harness import Harness, say
from benchmarks.workloads.count import _failed
from millpond.changelog.guarantees import Guarantee
from millpond.kafka.reading import FETCH_QUEUE_BACKOFF_MS

# --latency-rows picks rows by these names: (guarantee, task.commit.ms).
ROWS: dict[str, tuple[str, int]] = {"alo": ("at-least-once", 1000),
                                    "eo": ("effectively-once", 1000),
                                    "eos": ("exactly-once", 1000),
                                    "eos-100": ("exactly-once", 100)}
# the input producer's linger.ms, the same for every system: librdkafka's default (millpond's
# own producers linger 1 ms: millpond.kafka.producer.LINGER_MS)
LINGER_MS = 5
PROBE_EVERY_S = 0.1  # a probe message this often until the first output is seen
START_TIMEOUT_S = 120.0  # the first output must be seen within this
DRAIN_S = 15.0  # after the last message: give up when no output came for this + 3 commit intervals
DRAIN_CAP_S = 300.0  # ... or after this long
POLL_S = 0.05  # the reader's wait for a next record when none has arrived
PERCENTILES = (("p50", 500), ("p99", 990), ("p99_9", 999))  # per mille: exact ranks
# Pathway's autocommit_duration_ms: how long its Kafka reader gathers a minibatch before the
# engine processes it (default 1,500). Not a commit of anything durable (that is the
# persistence snapshot, every commit interval), so it is not tied to the row's commit
# interval: 100 ms, a tenth of the 1 s rows' commit, lets the minibatch add at most ~100 ms.
PATHWAY_AUTOCOMMIT_MS = 100


@dataclass(frozen=True)
class Row:
    """One row of the latency table: a system's count at a guarantee, commit interval and
    input rate."""

    system: str
    guarantee: str
    commit_ms: int
    rate: int

    @property
    def key(self) -> str:
        return f"{self.system} {self.guarantee}, commit {self.commit_ms} ms, {self.rate} msg/s"

    @property
    def isolation(self) -> str:
        """How the reader reads the outputs: as the job's own consumer reads its inputs
        (committed only where they are transactional, exactly-once)."""
        return Guarantee(self.guarantee).isolation


# ---- the figures (no Kafka: tests/bench/test_bench_latency.py) ----------------------------
def percentiles(values: Iterable[float]) -> dict[str, Any]:
    """Nearest-rank p50, p99, p99.9, max and mean of ``values`` (None each when empty)."""
    ordered = sorted(values)
    n = len(ordered)
    out: dict[str, Any] = {"n": n, "max": ordered[-1] if n else None,
                           "mean": sum(ordered) / n if n else None}
    for name, per_mille in PERCENTILES:
        rank = -(-per_mille * n // 1000)  # ceil(q * n), in integers
        out[name] = ordered[max(0, rank - 1)] if n else None
    return out


def loss_check(seqs: Iterable[int], produced: int, exactly_once: bool) -> dict[str, Any]:
    """Whether every seq in ``range(produced)`` is in ``seqs`` (at least once; exactly once
    when ``exactly_once``): the missing, duplicated and unexpected seqs, with examples."""
    times = [0] * produced
    unexpected: list[int] = []
    for s in seqs:
        if 0 <= s < produced:
            times[s] += 1
        else:
            unexpected.append(s)
    missing = [s for s, n in enumerate(times) if n == 0]
    duplicated = [s for s, n in enumerate(times) if n > 1]
    extra = sum(n - 1 for n in times if n > 1)
    correct = not missing and not unexpected and not (exactly_once and duplicated)
    return {"correct": correct, "missing": len(missing), "missing_examples": missing[:10],
            "duplicates": extra, "duplicated_seqs": len(duplicated),
            "duplicate_examples": duplicated[:10], "unexpected": len(unexpected),
            "unexpected_examples": unexpected[:10]}


def latencies(records: Iterable[tuple[int, float, float]], first_seq: int) -> list[float]:
    """(seen - ts_ms) of the first sighting of each ``(seq, ts_ms, seen_ms)`` record whose seq
    is ``first_seq`` or later (the probes and the warm-up's messages left out)."""
    out: list[float] = []
    first: set[int] = set()
    for seq, ts, seen in records:
        if seq >= first_seq and seq not in first:
            first.add(seq)
            out.append(seen - ts)
    return out


def input_record(seq: int, users: int, partitions: int) -> tuple[bytes, int, str]:
    """Message ``seq``'s key, partition and the value's head (``ts_ms`` goes last, at the
    produce call): the page views' user walk, partitioned by user number."""
    u = data.user_of(seq, users)
    user = f"user-{u:06d}"
    return user.encode(), u % partitions, f'{{"user_id":"{user}","seq":{seq},"ts_ms":'


# ---- the producer ------------------------------------------------------------------------
class Feed:
    """The input's producer: probes, then a paced run; counts what it produced and failed."""

    def __init__(self, bootstrap: str, topic: str, users: int, partitions: int) -> None:
        self.topic, self.users, self.partitions = topic, users, partitions
        self.failed = 0
        self.next_seq = 0
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": LINGER_MS,
                                  "enable.idempotence": True, "compression.type": "none",
                                  "delivery.report.only.error": True,
                                  "on_delivery": self._delivered})

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed += 1

    def send(self, deadline: float) -> None:
        """Produce the next seq, stamped with the wall clock in ms (BufferError: poll and
        retry until ``deadline``, time.monotonic())."""
        key, partition, head = input_record(self.next_seq, self.users, self.partitions)
        while True:
            try:
                self.producer.produce(self.topic, f"{head}{time.time() * 1000:.3f}}}".encode(),
                                      key, partition)
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the producer's queue stayed full; "
                                       f"{self.next_seq} messages produced") from None
                self.producer.poll(0.01)
        self.next_seq += 1

    def probe_until(self, seen: Callable[[], bool], timeout: float) -> float:
        """A message every PROBE_EVERY_S until ``seen()``; the seconds it took. Raises when
        ``timeout`` passes first."""
        began = time.monotonic()
        while not seen():
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"no output within {timeout:.0f} s of the first of "
                                   f"{self.next_seq} probe messages")
            self.send(began + timeout)
            self.producer.flush(PROBE_EVERY_S)
            time.sleep(PROBE_EVERY_S)
        return time.monotonic() - began

    def paced(self, rate: float, seconds: float) -> dict[str, Any]:
        """``rate`` messages a second for ``seconds``: each message goes when its time in the
        schedule has come (a sleep until then; a late one goes at once, so the schedule,
        not the sleeps, sets the rate), the producer polled before each sleep and every
        1,000 messages. The rate achieved and how far behind its schedule a message went
        (ms)."""
        total = round(rate * seconds)
        first_seq = self.next_seq
        began = time.perf_counter()
        deadline = time.monotonic() + seconds + 60
        behind = 0.0
        poll = self.producer.poll
        clock, sleep = time.perf_counter, time.sleep
        for i in range(total):
            due = began + i / rate
            now = clock()
            if now < due:
                poll(0)
                sleep(due - now)
                now = clock()
            elif i % 1000 == 0:
                poll(0)  # served on every round, also when behind
            behind = max(behind, now - due)
            self.send(deadline)
        ended = time.perf_counter()
        left = self.producer.flush(30)
        if left:
            raise RuntimeError(f"{left} input messages were not delivered in 30 s")
        elapsed = ended - began
        return {"first_seq": first_seq, "messages": total, "target_rate": rate,
                "seconds": elapsed,
                "achieved_rate": (total - 1) / elapsed if total > 1 and elapsed else None,
                "max_behind_ms": behind * 1000, "delivery_failures": self.failed}


# ---- the reader --------------------------------------------------------------------------
class OutputReader(threading.Thread):
    """Reads the output topic from its start and notes each record's ``(seq, ts_ms,
    seen_ms)``, seen_ms the wall clock when the client handed it over (in a batch of what
    had arrived, or alone after a wait)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, isolation: str,
                 retractions: bool = False) -> None:
        super().__init__(daemon=True, name=f"latency-reader-{topic}")
        self.isolation = isolation
        # an update stream's outputs (Pathway's): a record with "diff": -1 retracts a key's
        # previous row (an older seq); it is counted apart, not as an output of its seq
        self.retractions = 0 if retractions else None
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"bench-lat-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "isolation.level": isolation,
            "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.records: list[tuple[int, float, float]] = []
        # each record's Kafka timestamp: when the job produced it (its producer's CreateTime),
        # which splits a latency into the job's part and the output's way to the reader
        self.produced_ms: list[int] = []
        self.malformed = 0
        self.error: str | None = None
        self.first_seen = threading.Event()
        self._done = threading.Event()

    def run(self) -> None:
        loads = orjson.loads
        try:
            while not self._done.is_set():
                # What has arrived, at once; when nothing has, wait for the next record only:
                # consume(n, timeout) would wait for n records or the whole timeout, adding
                # up to that timeout to the latency it measures.
                batch = self.consumer.consume(1000, 0)
                if not batch:
                    one = self.consumer.poll(POLL_S)
                    batch = [one] if one is not None else []
                seen = time.time() * 1000
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self.error = err.str()
                        continue
                    try:
                        v = loads(msg.value() or b"null")
                        if self.retractions is not None and v.get("diff") == -1:
                            self.retractions += 1
                            continue
                        self.records.append((int(v["seq"]), float(v["ts_ms"]), seen))
                        self.produced_ms.append(msg.timestamp()[1])
                    except (ValueError, KeyError, TypeError, AttributeError):
                        self.malformed += 1
                if self.records:
                    self.first_seen.set()
        except Exception as exc:  # the run fails with it, not the thread silently
            self.error = repr(exc)
        finally:
            self.consumer.close()

    def drain(self, produced: int, exactly_once: bool, idle_s: float) -> dict[str, Any]:
        """Wait until every seq below ``produced`` was read, or no record came for
        ``idle_s`` seconds (or DRAIN_CAP_S passed); the loss check of what was read then,
        with the seconds waited."""
        began = time.monotonic()
        count, progress = -1, began
        while True:
            now = time.monotonic()
            if len(self.records) != count:
                count, progress = len(self.records), now
            done = (now - progress > idle_s or now - began > DRAIN_CAP_S
                    or not self.is_alive())
            if count >= produced or done:
                check = loss_check((r[0] for r in self.records[:count]), produced,
                                   exactly_once)
                if not check["missing"] or done:
                    return {**check, "drain_s": now - began}
            time.sleep(0.25)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=10 + POLL_S)


# ---- the systems -------------------------------------------------------------------------
class Job(Protocol):
    """A system's running count: alive or not, and stop (bounded) with its process figures."""

    def alive(self) -> bool: ...

    def stop(self) -> dict[str, Any]: ...


def _stopped(name: str, running: Running, **extra: Any) -> dict[str, Any]:
    """Stop a job's process (SIGTERM, bounded): its figures, and its error if it failed."""
    child: Child = running.stop(grace=60)
    return {"job": name, **extra, **systems._child_fields(child),
            **({"error": f"exit {child.returncode}: {child.tail()}"}
               if child.returncode != 0 else {})}


class MillpondJob:
    """``millpond run`` (unbounded) of benchmarks.jobs.LatencyCounter (the StreamTask), or
    with APP set, of the dataflow ``benchmarks.jobs:<APP>``."""

    APP: str | None = None
    PREFIX = "mpl"

    def __init__(self, h: Harness, row: Row, topic: str, output: str, tag: str) -> None:
        ctx = h.ctx
        self.name = f"{self.PREFIX}-{ctx.salt}-{systems.SHORT[row.guarantee]}-{tag}"
        run_dir = ctx.work / self.name
        run_dir.mkdir(parents=True, exist_ok=True)
        props = systems.millpond_props(ctx, self.name, topic, row.guarantee,
                                       run_dir / "state", run_dir / "timing.json", self.APP,
                                       output)
        props.update({"task.commit.ms": row.commit_ms, "bench.output": f"kafka.{output}"})
        if self.APP is None:
            props["task.class"] = "benchmarks.jobs.LatencyCounter"
        for kv in filter(None, os.environ.get("MILLPOND_BENCH_JOB_PROPS", "").split(";")):
            k, _, v = kv.partition("=")
            props[k] = v
        self.config = run_dir / "job.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        level = os.environ.get("MILLPOND_BENCH_JOB_LOG_LEVEL", "INFO")  # DEBUG: commit phases
        self.running = start_child([MILLPOND, "run", "--config", str(self.config),
                                    "--log-level", level], logdir=run_dir, name="run")

    def alive(self) -> bool:
        return self.running.alive()

    def stop(self) -> dict[str, Any]:
        return _stopped(self.name, self.running, config=str(self.config))


class DataflowJob(MillpondJob):
    """The same count as a millpond dataflow: ``benchmarks.jobs:latency_app``
    (``source(input).stateful_map("counts", ...).to(output)``)."""

    APP = "latency_app"
    PREFIX = "mpd"


class FloorJob:
    """benchmarks.latency_floor: the same count as a bare client loop (at-least-once only)."""

    def __init__(self, h: Harness, row: Row, topic: str, output: str, tag: str) -> None:
        self.name = f"floor-{h.ctx.salt}-{tag}"
        run_dir = h.ctx.work / self.name
        run_dir.mkdir(parents=True, exist_ok=True)
        self.running = start_child([sys.executable, "-m", "benchmarks.latency_floor",
                                    h.args.bootstrap, topic, output, f"bench-{self.name}"],
                                   logdir=run_dir, name="floor")

    def alive(self) -> bool:
        return self.running.alive()

    def stop(self) -> dict[str, Any]:
        return _stopped(self.name, self.running)


class PeerJob:
    """A peer's count, ``benchmarks/peers/<PEER>_count.py latency SPEC.json`` run by the
    interpreter of the peer's own virtualenv (systems.ensure_peer made it), unbounded, from
    its input's beginning (a fresh group or none: the probes go in before it has joined).
    Each script handles SIGTERM by ending its run and writing its report (the versions it
    ran, its own getrusage); its process figures are the harness's, as millpond's are."""

    PEER = ""
    PREFIX = ""

    def __init__(self, h: Harness, row: Row, topic: str, output: str, tag: str) -> None:
        self.name = f"{self.PREFIX}-{h.ctx.salt}-{systems.SHORT[row.guarantee]}-{tag}"
        run_dir = h.ctx.work / self.name
        run_dir.mkdir(parents=True, exist_ok=True)
        self.report = run_dir / "report.json"
        self.report.unlink(missing_ok=True)
        spec = {"bootstrap": h.args.bootstrap, "topic": topic, "output": output,
                "group": self.name, "out": str(self.report),
                **self.spec(row, run_dir)}
        self.spec_path = run_dir / "spec.json"
        self.spec_path.write_text(json.dumps(spec))
        self.running = start_child(
            [str(venv_python(self.PEER)), str(systems.PEERS / f"{self.PEER}_count.py"),
             "latency", str(self.spec_path)],
            cwd=run_dir, logdir=run_dir, name=self.PEER, env={"PYTHONWARNINGS": "ignore"})

    def spec(self, row: Row, run_dir: Path) -> dict[str, Any]:
        raise NotImplementedError

    def alive(self) -> bool:
        return self.running.alive()

    def stop(self) -> dict[str, Any]:
        """SIGTERM (bounded, as millpond's); the peer's own report beside the figures, its
        peak RSS the larger of the polled one and its own getrusage at its end."""
        res = _stopped(self.name, self.running, spec=str(self.spec_path))
        try:
            report = json.loads(self.report.read_text())
        except (OSError, ValueError):
            report = {}
        res.update({"versions": report.get("versions"), "in_process_cpu_s": report.get("cpu_s"),
                    "maxrss_mb_polled": res["maxrss_mb"],
                    "maxrss_mb": max(res["maxrss_mb"], report.get("maxrss_mb") or 0.0)})
        if not report and "error" not in res:
            res["error"] = f"{self.PEER} wrote no report: {self.running.cmd}"
        return res


class QuixJob(PeerJob):
    """Quix Streams: ``sdf.apply(count, stateful=True).to_topic(output)``, the row's
    guarantee (at-least-once or exactly-once) and ``commit_interval``."""

    PEER, PREFIX = "quix", "qxl"

    def spec(self, row: Row, run_dir: Path) -> dict[str, Any]:
        return {"guarantee": row.guarantee, "commit_interval": row.commit_ms / 1000,
                "state_dir": str(run_dir / "state")}


class BytewaxJob(PeerJob):
    """Bytewax 0.21: Kafka input (tail) -> stateful_map count -> Kafka output, recovery on
    with an epoch (snapshot) every commit interval; its sink is not transactional."""

    PEER, PREFIX = "bytewax", "bwl"

    def spec(self, row: Row, run_dir: Path) -> dict[str, Any]:
        return {"recovery_dir": str(run_dir / "state" / "recovery"), "partitions": 1,
                "epoch_interval": row.commit_ms / 1000}


class PathwayJob(PeerJob):
    """Pathway 0.33: kafka.read (streaming) -> groupby(user).reduce(count, latest seq and
    ts_ms) -> kafka.write (JSON, an update stream: the reader counts its insertions only),
    persistence on with a snapshot every commit interval."""

    PEER, PREFIX = "pathway", "pwl"

    def spec(self, row: Row, run_dir: Path) -> dict[str, Any]:
        return {"state_dir": str(run_dir / "state" / "persistence"),
                "snapshot_interval_ms": row.commit_ms,
                "autocommit_duration_ms": PATHWAY_AUTOCOMMIT_MS}


SYSTEMS: dict[str, Callable[[Harness, Row, str, str, str], Job]] = {
    "floor": FloorJob, "millpond": MillpondJob, "millpond-dataflow": DataflowJob,
    "quix": QuixJob, "bytewax": BytewaxJob, "pathway": PathwayJob}
FLOOR = "floor"  # always run (at-least-once rows only): what the client and broker give alone
PEERS = ("quix", "bytewax", "pathway")  # each from its own virtualenv (systems.ensure_peer)
# The guarantees each system has; a row of another guarantee is left out of its plan. Quix
# has no effectively-once; Bytewax's Kafka sink and Pathway's kafka.write are plain
# producers (no transactions), so their outputs are at-least-once whatever their recovery.
GUARANTEES: dict[str, tuple[str, ...]] = {
    "floor": ("at-least-once",), "millpond": systems.MILLPOND_GUARANTEES,
    "millpond-dataflow": systems.MILLPOND_GUARANTEES, "quix": systems.QUIX_GUARANTEES,
    "bytewax": ("at-least-once",), "pathway": ("at-least-once",)}
# Systems whose outputs are an update stream: a retraction (``"diff": -1``, the key's
# previous row, with its old seq) is not an output of that seq, so the reader skips it.
RETRACTING = ("pathway",)


# ---- a run -------------------------------------------------------------------------------
def _topics(h: Harness, tag: str) -> tuple[str, str]:
    """A fresh input and output topic of this run."""
    out = []
    for kind in ("in", "out"):
        topic = f"millpond-bench-lat{kind}-{h.salt}-{tag}"
        data.create_topic(h.args.bootstrap, topic, h.args.partitions)
        h.topics.append(topic)
        out.append(topic)
    return out[0], out[1]


def measure(h: Harness, row: Row, tag: str) -> dict[str, Any]:
    """One run of ``row``: start the system's job and the reader, probe until the first
    output, produce at the rate, drain, stop; the figures and the loss check."""
    a = h.args
    topic, output = _topics(h, tag)
    res: dict[str, Any] = {"system": row.system, "guarantee": row.guarantee,
                           "commit_ms": row.commit_ms, "rate": row.rate,
                           "isolation": row.isolation, "warmup_s": a.latency_warmup_s,
                           "seconds": a.latency_seconds, "users": a.latency_users,
                           "partitions": a.partitions, "input": topic, "output": output}
    cpu_before = time.process_time()
    reader = OutputReader(a.bootstrap, output, a.partitions, row.isolation,
                          retractions=row.system in RETRACTING)
    reader.start()
    feed = Feed(a.bootstrap, topic, a.latency_users, a.partitions)
    job: Job | None = None
    failure = None
    try:
        job = SYSTEMS[row.system](h, row, topic, output, tag)
        up = job
        res["startup_s"] = feed.probe_until(
            lambda: reader.first_seen.is_set() or not up.alive(), START_TIMEOUT_S)
        if not job.alive():
            raise RuntimeError("the job exited before its first output")
        res["probes"] = feed.next_seq
        res["produce"] = feed.paced(row.rate, a.latency_warmup_s + a.latency_seconds)
        res["drain"] = reader.drain(feed.next_seq, row.guarantee == "exactly-once",
                                    DRAIN_S + 3 * row.commit_ms / 1000)
    except Exception as exc:
        failure = f"{exc!r}"
    finally:
        if job is not None:
            res.update(job.stop())
        reader.stop()
        res["driver_cpu_s"] = time.process_time() - cpu_before
        res["load_average_after"] = load_average()
    if a.keep:  # every output's times, to see when and where the slow ones were held
        with open(h.work / f"{tag}-samples.csv", "w") as f:
            f.write("seq,ts_ms,out_ms,seen_ms\n")
            f.writelines(f"{seq},{ts:.3f},{out},{seen:.3f}\n"
                         for (seq, ts, seen), out in zip(reader.records, reader.produced_ms,
                                                         strict=True))
    if failure is not None:
        error = "; ".join(e for e in (failure, res.get("error")) if e)
        return {**res, "ok": False, "error": error}
    return _figures(res, reader, feed.next_seq)


def _figures(res: dict[str, Any], reader: OutputReader, produced: int) -> dict[str, Any]:
    """The run's latency percentiles, outputs and verdict (ok: it ran; correct: nothing
    lost, and under exactly-once nothing twice)."""
    prod, check = res["produce"], res["drain"]
    # The paced messages of the warm-up's seconds are not measured.
    measured_from = prod["first_seq"] + round(res["warmup_s"] * prod["target_rate"])
    res["latency_ms"] = percentiles(latencies(reader.records, measured_from))
    res.update({"produced": produced, "outputs": len(reader.records),
                "malformed": reader.malformed,
                **({"retractions": reader.retractions} if reader.retractions is not None
                   else {}), "achieved_rate": prod["achieved_rate"],
                **{k: check[k] for k in ("missing", "duplicates", "unexpected")}})
    problems = [p for p in (res.get("error"), reader.error and f"reader: {reader.error}",
                            prod["delivery_failures"]
                            and f"{prod['delivery_failures']} input messages not delivered")
                if p]
    res["ok"] = not problems and res["latency_ms"]["n"] > 0
    if not res["ok"]:
        res["error"] = "; ".join(problems) or "no output of the measured messages was read"
    res["correct"] = check["correct"] and not reader.malformed
    if not res["correct"]:
        res["examples"] = {k: check[k] for k in ("missing", "missing_examples",
                                                  "duplicate_examples", "unexpected_examples")}
    return res


def _say(row: Row, res: dict[str, Any]) -> None:
    if not res.get("ok"):
        say(f"  {row.key}: FAILED {str(res.get('error'))[:300]}")
        return
    lat = res["latency_ms"]
    say(f"  {row.key}: p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms, p99.9 "
        f"{lat['p99_9']:.1f} ms, max {lat['max']:.1f} ms over {lat['n']:,}; achieved "
        f"{res['achieved_rate']:,.0f} msg/s; {res['outputs']:,} outputs of "
        f"{res['produced']:,} produced, {res['missing']} missing, {res['duplicates']} "
        f"twice; steal {res.get('cpu_steal_percent')}%, CPU pressure "
        f"{res.get('cpu_pressure_percent')}%, load {res.get('load_average_before')}"
        f" -> {res.get('load_average_after')}"
        f"{'' if res.get('correct') else ' WRONG'}")


def _plan(h: Harness) -> list[Row]:
    """Every rate x selected system (the floor always) x latency row whose guarantee the
    system has (the others are left out, not failed); a peer's rows only once its
    virtualenv is ready (else systems.ensure_peer's reason is noted as a problem)."""
    a = h.args
    pairs = [(system, name) for system in SYSTEMS
             if system == FLOOR or system in a.system_list
             for name in a.latency_row_list if ROWS[name][0] in GUARANTEES[system]]
    ready = {system for system in dict.fromkeys(s for s, _ in pairs)
             if system not in PEERS or h.peer_ready(system)}
    return [Row(system, *ROWS[name], rate) for rate in a.latency_rate_list
            for system, name in pairs if system in ready]


def summarize_latency(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """A row's runs: the median (min, max) of each figure over its good runs."""
    good = [r for r in rs if r.get("ok") and r.get("correct")]
    out: dict[str, Any] = {"runs": rs, "good_runs": len(good), "all_runs": len(rs),
                           "wrong": any(r.get("ok") and not r.get("correct") for r in rs),
                           "failed": any(not r.get("ok") for r in rs)}
    if rs:
        first = rs[0]
        out.update({k: first.get(k) for k in ("system", "guarantee", "commit_ms", "rate")})
        out["isolation"] = Guarantee(first["guarantee"]).isolation
    for name in ("p50", "p99", "p99_9", "max"):
        out[f"{name}_ms"] = summarize([r["latency_ms"][name] for r in good])
    for field in ("achieved_rate", "outputs", "produced", "missing", "duplicates", "cpu_s",
                  "maxrss_mb", "cpu_steal_percent", "cpu_pressure_percent", "driver_cpu_s",
                  "startup_s"):
        out[field] = summarize([r[field] for r in good if r.get(field) is not None])
    out["max_behind_ms"] = summarize([r["produce"]["max_behind_ms"] for r in good])
    out["load_average_before"] = [r.get("load_average_before") for r in rs]
    out["load_average_after"] = [r.get("load_average_after") for r in rs]
    return out


def latency(h: Harness) -> None:
    a = h.args
    plan = _plan(h)
    h.results["latency"] = {"input": {
        "rates": a.latency_rate_list, "seconds": a.latency_seconds,
        "warmup_s": a.latency_warmup_s, "users": a.latency_users, "partitions": a.partitions,
        "producer": f"confluent-kafka, linger.ms {LINGER_MS}, idempotent, paced",
        "reader": f"confluent-kafka, consume(1000, 0) of what has arrived, else poll({POLL_S}) "
                  "for the next record; fetch.wait.max.ms 100",
        "value": '{"user_id", "seq", "ts_ms"} -> {"user", "count", "ts_ms", "seq"}'}}
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(a.latency_runs):
        for row in (plan if r % 2 == 0 else plan[::-1]):
            say(f"latency run {r + 1}/{a.latency_runs}: {row.key} for "
                f"{a.latency_warmup_s:g} + {a.latency_seconds:g} s (load {load_average()})")
            tag = f"l{r}k{plan.index(row)}"
            try:
                res = measure(h, row, tag)
            except Exception as exc:
                res = {**_failed(row.system, row.guarantee, exc), "rate": row.rate,
                       "commit_ms": row.commit_ms}
            _say(row, res)
            runs.setdefault(row.key, []).append(res)
    h.results["latency"]["rows"] = {key: summarize_latency(rs) for key, rs in runs.items()}
    h.report_bad_runs("latency", runs)

"""Windows and a windowed join under faults, run by 3 processes at once (the machinery of
``test_dataflow_faults``: SIGKILLs after a commit and at random moments, SIGSTOP pauses until
the paused process's tasks moved and it resumed as a zombie, live input).

1. **Window**: ``filter -> key_by(page) -> tumbling_window(W, grace_ms=G).count().final() -> to``
   over page views carrying an event time ``ts`` (the test's start plus the view's number in
   ms, plus a disorder below ``DISORDER``; results are timestamped with event times, so they
   must be recent: the broker's retention deletes records timestamped in 1970). The windows' operator reads the internal topic, where the views of
   different source tasks interleave as the processes happened to re-key them: a source task
   that a fault held up lags the others by the wall time it lost, so the grace covers
   ``GRACE_S`` of it (``GRACE_LONG_S`` in the three-round runs, whose SIGSTOP pauses last up
   to 35 s; the input runs at ``RATE`` ms of event time per wall second), and the
   test fails on any late record (the job logs them). Windows close under the faults; at the
   end a clean ``--bounded`` run on a fresh state directory restores the stores and takes the
   rest of the views, then one closing view per page, far ahead in event time, is produced
   and a second bounded run closes every window. Checks: each (page, window) final result
   equals the reference (the acknowledged counted views, by page and window); under
   ``exactly-once`` each appears exactly once read_committed, under ``effectively-once``
   the results deduplicated by (page, window) equal the reference (repeats are reported).

2. **Join**: ``impressions.window_join(clicks, WITHIN, how="left")``: impressions keyed by
   their id, each with 0-2 clicks of the same key (same partition), both topics produced
   live, clicks in their event-time order; a click within ``WITHIN`` ms of its impression
   joins it, the others do not. A closing click per partition, far ahead, expires the last
   impressions at the end. Checks: the output holds each brute-force pair (and each
   unmatched impression once as ``(imp, None)``), each exactly once read_committed under
   ``exactly-once``; none lost and nothing else under ``effectively-once``.

Both prove their faults as ``test_dataflow_faults`` does (mid-stream SIGKILLs, zombies fenced
or told their tasks were lost, checkpoints never going back, every task open in the final
run with a restored store). `make test-faults` runs one round per guarantee;
--faults-full three rounds on two seeds.
"""

from __future__ import annotations

import heapq
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.faults.test_dataflow_faults import (
    PARTITIONS,
    PROCESSES,
    SESSION_MS,
    Job,
    check_monotone,
    committed_after,
)
from tests.kafka_util import (
    checkpoint_history,
    create_topic,
    read_topic,
    ready_lines,
    run_job,
    write_properties,
)

pytestmark = pytest.mark.kafka

GUARANTEES = ["effectively-once", "exactly-once"]
PAGES = 24  # /p0 .. /p23; the app drops /p0, /p10 and /p20
USERS = 400
RATE = 400.0  # records per second; event time moves 1 ms per record
SIZE_MS = 1_000  # the window: 2.5 s of wall time
GRACE_S = 20.0  # a source task may lag the others this long (wall time) without late records
GRACE_LONG_S = 60.0  # the same, in the three-round runs (one of 20 s had late records)
DISORDER = 100  # ms of event-time disorder within a partition (well below the graces)
WITHIN_MS = 400  # the join's window
JOIN_GRACE_MS = 1_000
SEEDS = {"effectively-once": 5101, "exactly-once": 5202}

WINDOW_APP = """\
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
 .key_by("by-page", lambda view: view["page"])
 .tumbling_window({size}, grace_ms={grace}, timestamp=lambda view: view["ts"])
 .count("page-windows").final().to({out!r}))
"""

JOIN_APP = """\
import os
import time

from millpond.streams import App

DELAY = float(os.environ.get("DATAFLOW_FAULTS_DELAY_S") or 0)


def slow(record):
    if DELAY:
        time.sleep(DELAY)  # the chaos processes are slowed: faults land mid-batch
    return record


def pair(imp, click):
    return {{"imp": imp["i"], "click": None if click is None else click["c"]}}


app = App()
impressions = app.source({impressions!r}).map(slow)
clicks = app.source({clicks!r}).map(slow)
(impressions.window_join("ad-clicks", clicks, {within}, pair, how="left",
                         grace_ms={grace}, timestamp=lambda record: record["ts"])
 .to({out!r}))
"""


def _counted(page: str) -> bool:
    return not page.endswith("0")


# ---- the input ------------------------------------------------------------------------------

class Live(threading.Thread):
    """Produces records at ``rate`` per second until stopped (``make(n)``: the records of
    step ``n``, as (topic, key, value, partition)); ``acked`` holds the values the broker
    acknowledged."""

    def __init__(self, bootstrap: str, rate: float,
                 make: Callable[[int], list[tuple[str, str, dict[str, Any], int]]]) -> None:
        super().__init__(daemon=True)
        self.rate, self.make = rate, make
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "enable.idempotence": True, "acks": "all"})
        self.acked: list[tuple[str, dict[str, Any]]] = []  # (topic, value)
        self.errors: list[str] = []
        self.sent = 0
        self._halt = threading.Event()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err.str())
        else:
            self.acked.append((msg.topic(), json.loads(msg.value())))

    def send(self, topic: str, key: str, value: dict[str, Any], partition: int) -> None:
        self.producer.produce(topic, json.dumps(value), key.encode(), partition,
                              on_delivery=self._on_delivery)

    def run(self) -> None:
        began = time.monotonic()
        while not self._halt.is_set():
            due = int((time.monotonic() - began) * self.rate)
            while self.sent < due:
                for record in self.make(self.sent):
                    self.send(*record)
                self.sent += 1
            self.producer.poll(0.02)

    def stop(self) -> None:
        """Stop producing and wait for every delivery report."""
        self._halt.set()
        self.join(30)
        assert not self.is_alive(), "the producer did not stop"
        self.flush()

    def flush(self) -> None:
        assert self.producer.flush(60) == 0, "records left unacknowledged"
        assert not self.errors, f"delivery errors: {self.errors[:3]}"


def now_ms() -> int:
    """Where the event times start: now, to the window (results are timestamped with event
    times: in 1970 the broker's retention would delete them as they come)."""
    return int(time.time() * 1000) // SIZE_MS * SIZE_MS


def views_maker(topic: str, seed: int,
                base: int) -> Callable[[int], list[tuple[str, str, dict[str, Any], int]]]:
    """View ``n``: a random user (partitioned by it) and page, event time ``base + n`` ms
    plus a disorder below DISORDER."""
    rng = random.Random(seed)

    def make(n: int) -> list[tuple[str, str, dict[str, Any], int]]:
        p = n % PARTITIONS
        user = f"user-{rng.randrange(USERS // PARTITIONS) * PARTITIONS + p}"
        view = {"user_id": user, "page": f"/p{rng.randrange(PAGES)}", "i": n,
                "ts": base + DISORDER + n - rng.randrange(DISORDER)}
        return [(topic, user, view, p)]

    return make


def ads_maker(impressions: str, clicks: str, seed: int,
              base: int) -> Callable[[int], list[tuple[str, str, dict[str, Any], int]]]:
    """Impression ``n`` (key ``imp-n``, partition n % PARTITIONS, event time about
    ``base + n`` ms)
    and 0-2 clicks of it, some within WITHIN_MS and some not, each produced once the
    impressions' event time reaches it (so the clicks are out of order by < 2 * DISORDER)."""
    rng = random.Random(seed)
    pending: list[tuple[int, int, int]] = []  # (ts, click number, impression)
    clicks_made = [0]

    def make(n: int) -> list[tuple[str, str, dict[str, Any], int]]:
        ts = base + DISORDER + n - rng.randrange(DISORDER)
        out = [(impressions, f"imp-{n}", {"i": n, "ts": ts}, n % PARTITIONS)]
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            clicks_made[0] += 1
            heapq.heappush(pending, (ts + rng.randrange(-DISORDER, 2 * WITHIN_MS),
                                     clicks_made[0], n))
        while pending and pending[0][0] <= base + n:
            t, c, i = heapq.heappop(pending)
            out.append((clicks, f"imp-{i}", {"c": c, "i": i, "ts": t}, i % PARTITIONS))
        return out

    return make


# ---- the chaos ------------------------------------------------------------------------------

def chaos(cluster: Job, rng: random.Random, rounds: int, live: Live,
          settled: Callable[[], bool], closing: Callable[[], None] | None = None) -> float:
    """Start the processes, run ``rounds`` rounds of faults while ``live`` produces, wait
    until ``settled()``, stop the input (then ``closing()``), SIGTERM every process (each
    must exit 0). Returns the seconds it took."""
    began = time.monotonic()
    try:
        live.start()
        for slot in range(PROCESSES):
            cluster.start(slot)
        cluster.wait("every task open, and a commit", lambda: (
            set().union(*(m.owned() for m in cluster.awake())) == set(range(PARTITIONS))
            and sum(cluster.committed().values()) > 0))
        for _ in range(rounds):
            cluster.kill_after_commit(rng)
            cluster.pause_until_fenced(rng)
            cluster.kill_anytime(rng)
        cluster.wait("every task's progress after the faults", settled)
        live.stop()
        if closing is not None:
            closing()
        cluster.stop_all()
    finally:
        cluster.kill_all()
        live._halt.set()
    text = cluster.logs_text()
    assert "Traceback" not in text, text[text.index("Traceback"):][:3000]
    return time.monotonic() - began


def faults_proven(cluster: Job, bootstrap: str, job: str) -> tuple[str, int]:
    """The checks that the faults happened as planned; (a summary of them, checkpoints)."""
    t = cluster.tally
    for kill in t.kills:
        assert 0 < kill["committed"] < kill["total"], f"a kill was not mid-stream: {kill}"
        assert kill["when"] == "anytime" or kill["left"], f"the victim had no input left: {kill}"
    assert len(t.stops) == len(t.kills) // 2 and t.stops, t.stops
    checkpoints = check_monotone(bootstrap, job)
    stops = Counter(s["outcome"] for s in t.stops)
    first = t.kills[0]
    text = cluster.logs_text()
    return (f"{len(t.kills)} SIGKILLs (the first at {first['committed']:,}/{first['total']:,} "
            f"records committed), {len(t.stops)} SIGSTOPs of "
            f"{', '.join(str(s['paused_s']) for s in t.stops)} s (zombies: {stops['fenced']} "
            f"fenced, {stops['lost']} lost their tasks), {text.count(' ready: restored ')} "
            f"task opens, {checkpoints} checkpoints never going back"), checkpoints


def final_run(conf: Path, sources: tuple[str, ...], internal: str | None,
              fresh: bool, context: str = "") -> str:
    """A clean ``--bounded`` run; on a fresh state dir every task resumes past input it
    took under the faults, with its store restored from its changelog."""
    final = run_job(conf, "--bounded", timeout=240)
    assert final.returncode == 0, final.stderr[-3000:]
    resumed = ready_lines(final.stderr)
    assert sorted(t for t, _, _ in resumed) == [f"partition-{p}" for p in range(PARTITIONS)], (
        final.stderr[-3000:])
    if fresh:
        for task, restored, inputs in resumed:
            took = inputs.get(internal, 0) if internal else sum(inputs.get(s, 0) for s in sources)
            assert took > 0 and restored > 0, (
                f"{task} took nothing before the final run: {inputs}, {restored} restored")
    assert "late records" not in final.stderr, f"{context}\n{final.stderr[-3000:]}"
    return final.stderr


def config_writer(tmp_path: Path, job: str, module: str, guarantee: str,
                  bootstrap: str) -> Callable[[str], Path]:
    def config(state: str) -> Path:
        return write_properties(tmp_path / f"{state}.properties", {
            "job.name": job,
            "app.class": f"{module}:app",
            "task.processing.guarantee": guarantee,
            "task.commit.ms": 200,
            "systems.kafka.bootstrap.servers": bootstrap,
            "systems.kafka.samza.key.serde": "string",
            "systems.kafka.samza.msg.serde": "json",
            "systems.kafka.consumer.session.timeout.ms": SESSION_MS,
            "systems.kafka.consumer.heartbeat.interval.ms": 1000,
            "job.logged.store.base.dir": str(tmp_path / state),
        })
    return config


def watermarks(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(low, high) offsets of each partition of ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-marks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                for p in range(PARTITIONS)]
    finally:
        consumer.close()


def once_check(seen: Counter[Any], wanted: set[Any]) -> tuple[int, int, int]:
    """(lost, repeated, unexpected) of output records ``seen`` against ``wanted``."""
    lost = len(wanted - set(seen))
    repeated = sum(n - 1 for n in seen.values() if n > 1)
    return lost, repeated, len(set(seen) - wanted)


# ---- 1. a windowed count --------------------------------------------------------------------

def run_window_chaos(guarantee: str, seed: int, rounds: int, report: Callable[..., None],
                     bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path) -> None:
    rng = random.Random(seed)
    grace_ms = int((GRACE_S if rounds == 1 else GRACE_LONG_S) * RATE)
    source, out, job = topic_name("views"), topic_name("windows"), topic_name("job")
    for topic in (source, out):
        create_topic(bootstrap, topic, PARTITIONS)
    (tmp_path / "window_faults_app.py").write_text(WINDOW_APP.format(
        source=source, out=out, size=SIZE_MS, grace=grace_ms))
    config = config_writer(tmp_path, job, "window_faults_app", guarantee, bootstrap)
    internal = f"{job}-1-by-page-repartition"
    live = Live(bootstrap, RATE, views_maker(source, seed, now_ms()))
    cluster = Job(tmp_path, config, bootstrap, job, (source,), internal)

    def lag_s(ends: dict[int, int]) -> dict[int, float]:
        # how far (wall seconds of input) each source task's commits are behind ``ends``
        committed = cluster.committed()
        return {p: round((end - committed.get(p, 0)) * PARTITIONS / RATE, 1)
                for p, end in ends.items()}

    def settled() -> bool:
        # every task took re-keyed views, windows closed under the faults, and every source
        # task is within half the grace of the input's end: a task still held up by the last
        # fault when the processes stop would re-key its backlog in the final run behind the
        # stream time the others reached, and its records would be late by design
        return cluster.all_rekeyed() and sum(cluster.offsets.get_watermark_offsets(
            TopicPartition(out, p), timeout=30)[1] for p in range(PARTITIONS)) > 0 and (
            max(lag_s(cluster.ends()).values()) < grace_ms / RATE / 2)

    chaos_s = chaos(cluster, rng, rounds, live, settled)
    text = cluster.logs_text()
    assert "late records" not in text, [line for line in text.splitlines() if "late" in line]
    under_faults = len(read_topic(bootstrap, out, "read_committed"))
    summary, _ = faults_proven(cluster, bootstrap, job)

    views = [v for _, v in live.acked]
    expected: Counter[tuple[str, int]] = Counter(
        (v["page"], v["ts"] // SIZE_MS * SIZE_MS) for v in views if _counted(v["page"]))
    final_conf = config("state-final")
    input_ends = {p: high for p, (_, high) in enumerate(watermarks(bootstrap, source))}
    final_run(final_conf, (source,), internal, fresh=True,  # (the job's consumer is closed)
              context=f"source tasks' lag at the stop (s): {lag_s(input_ends)}")
    # The final run took every view: no committed re-keyed view after its checkpoints.
    last = {int(task.rsplit("-", 1)[1]): offs[-1].get(internal, 0)
            for task, offs in checkpoint_history(bootstrap, job).items()}
    assert not committed_after(bootstrap, internal, last), "re-keyed views left unread"
    # Close every window: a view per page, far ahead of the others.
    top = max(v["ts"] for v in views)
    far = (top // SIZE_MS + 2) * SIZE_MS + grace_ms
    closer = Live(bootstrap, RATE, lambda n: [])
    for k in range(PAGES):
        closer.send(source, f"closer-{k}", {"user_id": f"closer-{k}", "page": f"/p{k}",
                                            "i": -1 - k, "ts": far}, k % PARTITIONS)
    closer.flush()
    final_run(final_conf, (source,), internal, fresh=False)

    def finals(isolation: str) -> Counter[tuple[str, int, int]]:
        seen: Counter[tuple[str, int, int]] = Counter()
        for msg in read_topic(bootstrap, out, isolation):
            result = json.loads(msg.value())
            assert result["end"] == result["start"] + SIZE_MS, result
            seen[(msg.key().decode(), result["start"], result["value"])] += 1
        return seen

    wanted = {(page, start, n) for (page, start), n in expected.items()}
    isolation = "read_committed" if guarantee == "exactly-once" else "read_uncommitted"
    seen = finals(isolation)
    lost, repeated, wrong = once_check(seen, wanted)
    tried = (f"seed {seed}, {len(views):,} views live over {PROCESSES} processes, "
             f"{len(wanted):,} (page, window) results ({under_faults:,} of them final under "
             f"the faults); {summary}; {chaos_s:.0f} s of chaos")
    fault = f"dataflow tumbling window count final(): SIGKILL + SIGSTOP ({guarantee})"
    if guarantee == "exactly-once":
        _, aborted, _ = once_check(finals("read_uncommitted"), wanted)
        report(fault, tried, lost + wrong, repeated,
               f"exact; each final result once read_committed ({aborted} aborted repeats "
               "read_uncommitted)" if lost + repeated + wrong == 0 else "DIFF")
    else:
        report(fault, tried, lost + wrong, repeated,
               f"{'exact' if lost + wrong == 0 else 'DIFF'} (deduplicated by page and "
               f"window); {repeated} repeated read_uncommitted")
    assert under_faults > 0, "no window closed under the faults"
    wrong_keys = {(p, s) for p, s, _ in set(seen) - wanted}
    assert (lost, wrong) == (0, 0), (
        f"{lost} final results missing, {wrong} wrong or unexpected: "
        f"{sorted(set(seen) - wanted)[:5]} for {[(k, expected.get(k)) for k in wrong_keys][:5]}")
    if guarantee == "exactly-once":
        assert repeated == 0, f"{repeated} final results repeated read_committed"


# ---- 2. a windowed stream-stream join -------------------------------------------------------

def run_join_chaos(guarantee: str, seed: int, rounds: int, report: Callable[..., None],
                   bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path) -> None:
    rng = random.Random(seed)
    impressions, clicks = topic_name("impressions"), topic_name("clicks")
    out, job = topic_name("ad-outcomes"), topic_name("job")
    for topic in (impressions, clicks, out):
        create_topic(bootstrap, topic, PARTITIONS)
    (tmp_path / "join_faults_app.py").write_text(JOIN_APP.format(
        impressions=impressions, clicks=clicks, out=out, within=WITHIN_MS,
        grace=JOIN_GRACE_MS))
    config = config_writer(tmp_path, job, "join_faults_app", guarantee, bootstrap)
    sources = (impressions, clicks)
    base = now_ms()
    live = Live(bootstrap, RATE, ads_maker(impressions, clicks, seed, base))
    cluster = Job(tmp_path, config, bootstrap, job, sources, None)

    def settled() -> bool:
        # every task committed clicks (so joined pairs), past the first faults
        ckpts = cluster.checkpoints()
        return all(ckpts.get(p, {}).get(clicks, 0) > 0 for p in range(PARTITIONS))

    def closing() -> None:  # a click per partition far ahead: the last impressions expire
        far = base + live.sent + 10 * (WITHIN_MS + JOIN_GRACE_MS)
        for p in range(PARTITIONS):
            live.send(clicks, f"closer-{p}", {"c": -1 - p, "i": -1, "ts": far}, p)
        live.flush()

    chaos_s = chaos(cluster, rng, rounds, live, settled, closing)
    text = cluster.logs_text()
    assert "late records" not in text, [line for line in text.splitlines() if "late" in line]
    under_faults = len(read_topic(bootstrap, out, "read_committed"))
    summary, _ = faults_proven(cluster, bootstrap, job)
    final_run(config("state-final"), sources, None, fresh=True)

    imps = {v["i"]: v["ts"] for t, v in live.acked if t == impressions}
    pairs = {(v["i"], v["c"]) for t, v in live.acked
             if t == clicks and v["i"] in imps and abs(v["ts"] - imps[v["i"]]) <= WITHIN_MS}
    matched = {i for i, _ in pairs}
    wanted: set[tuple[int, int | None]] = pairs | {(i, None) for i in imps if i not in matched}

    def outcomes(isolation: str) -> Counter[tuple[int, int | None]]:
        seen: Counter[tuple[int, int | None]] = Counter()
        for msg in read_topic(bootstrap, out, isolation):
            result = json.loads(msg.value())
            assert msg.key().decode() == f"imp-{result['imp']}", (msg.key(), result)
            seen[(result["imp"], result["click"])] += 1
        return seen

    isolation = "read_committed" if guarantee == "exactly-once" else "read_uncommitted"
    seen = outcomes(isolation)
    lost, repeated, wrong = once_check(seen, wanted)
    tried = (f"seed {seed}, {len(imps):,} impressions and {len(live.acked) - len(imps):,} "
             f"clicks live over {PROCESSES} processes: {len(pairs):,} pairs within "
             f"{WITHIN_MS} ms, {len(wanted) - len(pairs):,} unmatched impressions "
             f"({under_faults:,} results under the faults); {summary}; {chaos_s:.0f} s of "
             "chaos")
    fault = f"window_join how=left of two live streams: SIGKILL + SIGSTOP ({guarantee})"
    if guarantee == "exactly-once":
        _, aborted, _ = once_check(outcomes("read_uncommitted"), wanted)
        report(fault, tried, lost + wrong, repeated,
               f"exact; each pair once read_committed ({aborted} aborted repeats "
               "read_uncommitted)" if lost + repeated + wrong == 0 else "DIFF")
    else:
        report(fault, tried, lost + wrong, repeated,
               f"{'exact' if lost + wrong == 0 else 'DIFF'} (deduplicated); {repeated} "
               "repeated read_uncommitted")
    marks = watermarks(bootstrap, out)
    assert under_faults > 0, f"no join result under the faults (output offsets {marks})"
    assert (lost, wrong) == (0, 0), (
        f"{lost} join results missing ({sorted(wanted - set(seen))[:5]}), {wrong} unexpected "
        f"({sorted(set(seen) - wanted, key=str)[:5]})")
    if guarantee == "exactly-once":
        assert repeated == 0, f"{repeated} join results repeated read_committed"


RUNS = {"window": run_window_chaos, "join": run_join_chaos}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("guarantee", GUARANTEES)
@pytest.mark.parametrize("app", list(RUNS))
def test_windows_sigkills_and_zombies(
    app: str, guarantee: str, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One round: a SIGKILL after a commit, a SIGSTOP until the tasks moved (a zombie), a
    SIGKILL at a random moment; every final window result (join pair) as the reference, once
    read_committed under exactly-once."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the app's module, for every command
    RUNS[app](guarantee, SEEDS[guarantee], 1, report, kafka_bootstrap, topic_name, tmp_path)


@pytest.mark.faults_full
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("guarantee", GUARANTEES)
@pytest.mark.parametrize("app", list(RUNS))
def test_windows_sigkills_and_zombies_long(
    app: str, guarantee: str, seed: int, report: Callable[..., None], kafka_bootstrap: str,
    topic_name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three rounds per seed (part of `make faults` only)."""
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    RUNS[app](guarantee, SEEDS[guarantee] + seed, 3, report, kafka_bootstrap, topic_name,
              tmp_path)

"""Bytewax side of the dataflow-count benchmark (runs inside the Bytewax virtualenv).

    python bytewax_count.py count SPEC.json   # count the input per user to the topic's end
    python bytewax_count.py dump  SPEC.json   # read the recovery partitions: {user: count}
    python bytewax_count.py windows SPEC.json # 1-minute tumbling count per user to spec output
    python bytewax_count.py latency SPEC.json # per-user count, each update to spec output, until SIGTERM

SPEC.json holds bootstrap, topic, recovery_dir, partitions (recovery partitions to create),
epoch_interval (seconds, the commit interval of the other systems), messages and out (where
this writes its JSON report).

The dataflow is ``kafka input -> key_on user_id -> stateful_map count -> output``, one
process with one worker, recovery on (``bytewax.recovery``: a snapshot of the count of every
key changed in an epoch, and of the input offsets, into SQLite partitions at each epoch's
end). The input is bounded (``tail=False``: each partition stops at its end). The value is
decoded with orjson (millpond's JSON decoder; installed beside bytewax so the decoder is
not what differs); the output discards the counts it is given, as millpond's dataflow count
without ``.to()`` drops the counts its ``count`` emits: both keep the counts as state.
"""

from __future__ import annotations

import pickle
import resource
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any


def _usage() -> dict[str, float]:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": u.ru_utime + u.ru_stime, "maxrss_mb": u.ru_maxrss / 1024}


STEP = "count"  # the stateful step's id (its snapshots are read back by dump)


def _flow(spec: dict, first: list[float]):  # type: ignore[no-untyped-def]
    import bytewax.operators as op
    import orjson
    from bytewax.connectors.kafka import operators as kop
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class _Discard(StatelessSinkPartition):  # type: ignore[misc]
        def write_batch(self, items: list[Any]) -> None:
            pass

    class Discard(DynamicSink):  # type: ignore[misc]
        def build(self, step_id: str, worker_index: int, worker_count: int) -> _Discard:
            return _Discard()

    loads = orjson.loads
    flow = Dataflow("bench_count")
    inp = kop.input("inp", flow, brokers=[spec["bootstrap"]], topics=[spec["topic"]],
                    tail=False)

    def user(msg: Any) -> str:
        if not first:
            first.append(time.time())
        return loads(msg.value)["user_id"]

    keyed = op.key_on("key_on_user", inp.oks, user)

    def add(state: int | None, _msg: Any) -> tuple[int, int]:
        n = (state or 0) + 1
        return n, n

    counts = op.stateful_map(STEP, keyed, add)
    op.output("out", counts, Discard())
    return flow


def _run(flow: Any, spec: dict) -> None:
    """Run ``flow`` in one worker with recovery on: SQLite snapshots in the spec's
    ``recovery_dir`` (made here, ``partitions`` of them), an epoch every ``epoch_interval``
    seconds."""
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.run import cli_main

    recovery = Path(spec["recovery_dir"])
    recovery.mkdir(parents=True, exist_ok=True)
    init_db_dir(recovery, int(spec.get("partitions", 1)))
    cli_main(flow, workers_per_process=1,
             epoch_interval=timedelta(seconds=float(spec["epoch_interval"])),
             recovery_config=RecoveryConfig(recovery))


def count(spec: dict) -> dict:
    started = time.time()

    first: list[float] = []
    flow = _flow(spec, first)
    _run(flow, spec)
    ended = time.time()
    return {"started": started, "first_message": first[0] if first else None, "ended": ended,
            **_usage()}


def _window_flow(spec: dict, first: list[float]):  # type: ignore[no-untyped-def]
    """The windows workload: ``count_window`` (bytewax.operators.windowing) over a
    TumblingWindower of ``window_ms`` aligned to the epoch, by an EventClock on the value's
    ``ts``; each window's count to the output topic as ``{"start", "end", "value"}`` (JSON,
    orjson) under the user id.

    Bytewax's watermark per key is the key's largest ``ts`` minus ``wait_for_system_duration``
    plus the wall-clock time since that record: with no wait, a key's next record that comes
    more wall-clock time after its previous one than the event time between them is late
    (dropped). ``wait_s`` (the spec's) bounds that; at the end of input (EOF) every open
    window closes."""
    from datetime import UTC, datetime

    import bytewax.operators as op
    import orjson
    from bytewax.connectors.kafka import KafkaSinkMessage
    from bytewax.connectors.kafka import operators as kop
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, count_window

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    size_ms = int(spec["window_ms"])
    loads, dumps = orjson.loads, orjson.dumps
    flow = Dataflow("bench_windows")
    inp = kop.input("inp", flow, brokers=[spec["bootstrap"]], topics=[spec["topic"]],
                    tail=False)

    def view(msg: Any) -> tuple[str, int]:
        if not first:
            first.append(time.time())
        v = loads(msg.value)
        return v["user_id"], v["ts"]

    views = op.map("decode", inp.oks, view)
    clock = EventClock(ts_getter=lambda v: epoch + timedelta(milliseconds=v[1]),
                       wait_for_system_duration=timedelta(seconds=float(spec["wait_s"])))
    windower = TumblingWindower(length=timedelta(milliseconds=size_ms), align_to=epoch)
    out = count_window("windows", views, clock, windower, key=lambda v: v[0])

    def message(item: tuple[str, tuple[int, int]]) -> Any:
        user, (window_id, n) = item
        start = window_id * size_ms
        return KafkaSinkMessage(user.encode(),
                                dumps({"start": start, "end": start + size_ms, "value": n}))

    kop.output("out", op.map("encode", out.down, message), brokers=[spec["bootstrap"]],
               topic=spec["output"])
    return flow


def windows(spec: dict) -> dict:
    started = time.time()

    first: list[float] = []
    flow = _window_flow(spec, first)
    _run(flow, spec)
    ended = time.time()
    return {"started": started, "first_message": first[0] if first else None, "ended": ended,
            **_usage()}


def _latency_flow(spec: dict, first: list[float]):  # type: ignore[no-untyped-def]
    """The latency workload (benchmarks/workloads/latency.py): ``kafka input (tail: waits
    for new data, from the topic's beginning) -> key_on user_id -> stateful_map count ->
    kafka output``, every input ``{"user_id", "seq", "ts_ms"}`` giving one record ``{"user",
    "count", "ts_ms", "seq"}`` under the user (orjson). Bytewax's Kafka sink is a plain
    producer that flushes each batch it is given (no transactions): at-least-once."""
    import bytewax.operators as op
    import orjson
    from bytewax.connectors.kafka import KafkaSinkMessage
    from bytewax.connectors.kafka import operators as kop
    from bytewax.dataflow import Dataflow

    loads, dumps = orjson.loads, orjson.dumps
    flow = Dataflow("bench_latency")
    inp = kop.input("inp", flow, brokers=[spec["bootstrap"]], topics=[spec["topic"]],
                    tail=True)

    def decode(msg: Any) -> tuple[str, Any]:
        if not first:
            first.append(time.time())
        v = loads(msg.value)
        return v["user_id"], v

    keyed = op.map("decode", inp.oks, decode)

    def add(state: int | None, v: Any) -> tuple[int, bytes]:
        n = (state or 0) + 1
        return n, dumps({"user": v["user_id"], "count": n, "ts_ms": v["ts_ms"],
                         "seq": v["seq"]})

    counts = op.stateful_map(STEP, keyed, add)

    def message(item: tuple[str, bytes]) -> Any:
        return KafkaSinkMessage(item[0].encode(), item[1])

    kop.output("out", op.map("encode", counts, message), brokers=[spec["bootstrap"]],
               topic=spec["output"])
    return flow


def latency(spec: dict) -> dict:
    """Runs the latency flow until SIGTERM. Bytewax leaves SIGTERM to Python's default
    (the process dies, no report): here it raises KeyboardInterrupt, which ends the run
    (raised in the Kafka source's ``next_batch``, it comes out of ``cli_main`` as a
    BytewaxRuntimeError caused by it), and the report is written after it."""
    import signal

    started = time.time()

    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    first: list[float] = []
    flow = _latency_flow(spec, first)
    signal.signal(signal.SIGTERM, interrupt)
    stopped = None
    try:
        _run(flow, spec)
    except Exception as exc:
        if not _interrupted(exc):
            raise
        stopped = "SIGTERM"
    except KeyboardInterrupt:
        stopped = "SIGTERM"
    return {"started": started, "first_message": first[0] if first else None,
            "ended": time.time(), "stopped": stopped, **_usage()}


def _interrupted(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or was caused by, a KeyboardInterrupt (the SIGTERM handler's)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def dump(spec: dict) -> dict:
    """Every key's count as of the last committed epoch: per key, its latest snapshot of the
    count step at or before the epoch every recovery partition committed (what a restart
    would resume from)."""
    rows: list[tuple[str, int, bytes | None]] = []
    commits: list[int] = []
    dbs = sorted(str(p) for p in Path(spec["recovery_dir"]).glob("*.sqlite3"))
    for db in dbs:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            # 0.21 names the snapshots of stateful_map "<flow>.<step>.stateful_flat_map...".
            rows += conn.execute("SELECT state_key, snap_epoch, ser_change FROM snaps "
                                 "WHERE step_id LIKE ?", (f"bench_count.{STEP}.%",)).fetchall()
            commits += [e for (e,) in conn.execute("SELECT commit_epoch FROM commits")]
        finally:
            conn.close()
    committed = min(commits) if commits else None
    latest: dict[str, tuple[int, Any]] = {}
    for key, epoch, blob in rows:
        if committed is not None and epoch > committed:
            continue
        if key not in latest or epoch > latest[key][0]:
            latest[key] = (epoch, pickle.loads(blob) if blob is not None else None)
    counts = {k: v for k, (_, v) in latest.items() if v is not None}
    return {"counts": counts, "dbs": dbs, "committed_epoch": committed,
            "epochs": sorted({e for e, _ in latest.values()})}


if __name__ == "__main__":
    from peer_main import main  # this directory, first on sys.path when run as a script

    main({"count": count, "dump": dump, "windows": windows, "latency": latency},
         ("bytewax", "confluent-kafka", "orjson"))

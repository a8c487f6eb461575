"""Quix Streams side of the stateful-count benchmark (runs inside the Quix virtualenv).

    python quix_count.py count   SPEC.json   # count the input per user, stop after N messages
    python quix_count.py recover SPEC.json   # start on deleted state, stop when recovery is done
    python quix_count.py dump    SPEC.json   # read the state dir: {user: count} (not timed)
    python quix_count.py windows SPEC.json   # 1-minute tumbling count per key to spec output
    python quix_count.py latency SPEC.json   # per-user count, each update to spec output, until SIGTERM
    python quix_count.py join    SPEC.json   # stream join_asof table to spec output (two phases)

SPEC.json holds bootstrap, topic, group, state_dir, guarantee, messages, commit_interval and
out (where this writes its JSON report). The count is the per-key state of the message
key (``user_id``), the same logic as millpond's BenchCounter.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path


def _usage() -> dict[str, float]:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": u.ru_utime + u.ru_stime, "maxrss_mb": u.ru_maxrss / 1024}


def _application(spec: dict):  # type: ignore[no-untyped-def]
    """The Application every mode runs: the spec's broker, group, guarantee, commit interval
    and state dir, reading from the topic's start."""
    from quixstreams import Application

    return Application(
        broker_address=spec["bootstrap"], consumer_group=spec["group"],
        auto_offset_reset="earliest", processing_guarantee=spec["guarantee"],
        commit_interval=float(spec["commit_interval"]), state_dir=spec["state_dir"],
        loglevel="WARNING",
    )


def _app(spec: dict):  # type: ignore[no-untyped-def]
    app = _application(spec)
    topic = app.topic(spec["topic"], key_deserializer="str", value_deserializer="json")
    sdf = app.dataframe(topic)
    first: list[float] = []

    def count(value, state):  # type: ignore[no-untyped-def]
        if not first:
            first.append(time.time())
        state.set("count", state.get("count", 0) + 1)

    sdf.update(count, stateful=True)
    return app, first


def count(spec: dict) -> dict:
    started = time.time()
    app, first = _app(spec)
    app.run(count=int(spec["messages"]), collect=False)
    ended = time.time()
    return {"started": started, "first_message": first[0] if first else None, "ended": ended,
            **_usage()}


def windows(spec: dict) -> dict:
    """The windows workload: ``tumbling_window(window_ms).count().final()`` by the value's
    ``ts`` (the topic's timestamp extractor), each result ``{"start", "end", "value"}`` to
    the output topic under the message key. Closing strategy "partition": a window closes
    when the partition's event time passes its end (as millpond's operator does); the
    default "key" closes a key's windows only at that key's next record, so every key's
    last window would stay open."""
    started = time.time()
    app = _application(spec)
    first: list[float] = []

    def ts(value, headers, timestamp, timestamp_type):  # type: ignore[no-untyped-def]
        if not first:
            first.append(time.time())
        return value["ts"]

    topic = app.topic(spec["topic"], key_deserializer="str", value_deserializer="json",
                      timestamp_extractor=ts)
    output = app.topic(spec["output"], key_serializer="str", value_serializer="json")
    sdf = app.dataframe(topic)
    sdf = sdf.tumbling_window(int(spec["window_ms"])).count().final(
        closing_strategy="partition")
    sdf.to_topic(output)
    # run(count=N) stops after N outputs: the data's windows, all closed by the flush records.
    app.run(count=int(spec["outputs"]), collect=False)
    ended = time.time()
    return {"started": started, "first_message": first[0] if first else None, "ended": ended,
            **_usage()}


def join(spec: dict) -> dict:
    """The joins workload: ``stream.join_asof(table)`` (inner; both topics' event time is the
    value's ``ts``, every table row older than every stream record), each match merged as
    benchmarks/jobs.py's ``enrich`` merges it and sent to the output topic. Phase ``load``
    reads the table (the stream topic is still empty) and stops once all ``table_rows`` are
    stored (Quix's ``stop`` commits the checkpoint); phase ``join`` is the same app, group
    and state dir over the filled stream topic, stopped after ``outputs`` results. Two
    phases because Quix reads both topics at once: a page view read before its user's row
    would find nothing."""
    started = time.time()
    app = _application(spec)
    first: list[float] = []
    rows = [0]
    want_rows = int(spec["table_rows"])

    def ts(value, headers, timestamp, timestamp_type):  # type: ignore[no-untyped-def]
        return value["ts"]

    def seen(value):  # type: ignore[no-untyped-def]
        rows[0] += 1
        if rows[0] == want_rows and spec["phase"] == "load":
            app.stop()

    def enrich(view, profile):  # type: ignore[no-untyped-def]
        if not first:
            first.append(time.time())
        return {"seq": view["seq"], "user_id": view["user_id"], "page": view["page"],
                "zip": profile["zip"], "tier": profile["tier"]}

    table = app.topic(spec["table"], key_deserializer="str", value_deserializer="json",
                      timestamp_extractor=ts)
    stream = app.topic(spec["topic"], key_deserializer="str", value_deserializer="json",
                       timestamp_extractor=ts)
    output = app.topic(spec["output"], key_serializer="str", value_serializer="json")
    right = app.dataframe(table).update(seen)
    sdf = app.dataframe(stream).join_asof(right, how="inner", on_merge=enrich)
    sdf.to_topic(output)
    if spec["phase"] == "load":
        app.run(timeout=float(spec.get("load_timeout", 600)))
    else:
        app.run(count=int(spec["outputs"]), collect=False)
    ended = time.time()
    return {"started": started, "first_message": first[0] if first else None, "ended": ended,
            "table_rows_read": rows[0], **_usage()}


def latency(spec: dict) -> dict:
    """The latency workload (benchmarks/workloads/latency.py): for every input
    ``{"user_id", "seq", "ts_ms"}`` the user's count + 1 in state and one record
    ``{"user", "count", "ts_ms", "seq"}`` to the output topic under the message key
    (``sdf.apply(..., stateful=True).to_topic(output)``), Quix's producer and consumer
    settings left at its defaults. Unbounded: it runs until SIGTERM, which Quix's
    ``Application.run`` handles itself (it stops the app after the message in hand, commits
    and returns), so the report below is still written."""
    started = time.time()
    app = _application(spec)
    topic = app.topic(spec["topic"], key_deserializer="str", value_deserializer="json")
    output = app.topic(spec["output"], key_serializer="str", value_serializer="json")
    first: list[float] = []

    def count(value, state):  # type: ignore[no-untyped-def]
        if not first:
            first.append(time.time())
        n = state.get("count", 0) + 1
        state.set("count", n)
        return {"user": value["user_id"], "count": n, "ts_ms": value["ts_ms"],
                "seq": value["seq"]}

    app.dataframe(topic).apply(count, stateful=True).to_topic(output)
    app.run()
    return {"started": started, "first_message": first[0] if first else None,
            "ended": time.time(), **_usage()}


def recover(spec: dict) -> dict:
    from quixstreams.state.manager import StateStoreManager as StateManager

    started = time.time()
    app, _ = _app(spec)
    spans: list[tuple[float, float]] = []
    original = StateManager.do_recovery

    def timed(self):  # type: ignore[no-untyped-def]
        began = time.time()
        original(self)
        spans.append((began, time.time()))
        app.stop()

    StateManager.do_recovery = timed  # type: ignore[method-assign]
    app.run(timeout=float(spec.get("recover_timeout", 300)))
    ended = time.time()
    return {"started": started, "recovery_began": spans[0][0] if spans else None,
            "recovery_done": spans[-1][1] if spans else None, "recoveries": len(spans),
            "ended": ended, **_usage()}


def dump(spec: dict) -> dict:
    """Every count in the state dir's RocksDB stores, by message key."""
    from rocksdict import AccessType, Options, Rdict

    counts: dict[str, int] = {}
    dbs = []
    for current in sorted(Path(spec["state_dir"]).rglob("CURRENT")):
        db_dir = current.parent
        dbs.append(str(db_dir))
        db = Rdict(str(db_dir), Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            for key, value in db.items():
                if not isinstance(key, bytes) or not key.endswith(b'|"count"'):
                    continue
                user = key[: -len(b'|"count"')].decode()
                if user.startswith('"'):  # the message key, serialized as a JSON string
                    user = json.loads(user)
                counts[user] = json.loads(value)
        finally:
            db.close()
    return {"counts": counts, "dbs": dbs}


if __name__ == "__main__":
    from peer_main import main  # this directory, first on sys.path when run as a script

    main({"count": count, "recover": recover, "dump": dump, "windows": windows,
          "latency": latency, "join": join},
         ("quixstreams", "confluent-kafka", "rocksdict"))

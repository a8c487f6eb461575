"""Faust (faust-streaming) side of the stateful-count benchmark (runs in the Faust virtualenv).

    python faust_count.py count SPEC.json   # count per user into a RocksDB table, stop after N
    python faust_count.py dump  SPEC.json   # read the table's RocksDB dirs: {user: count}

SPEC.json: bootstrap, topic, group (the app id), state_dir (datadir), guarantee
(at_least_once | exactly_once), messages, partitions, commit_interval, out.
The table is ``app.Table("counts", default=int)`` on the RocksDB store (rocksdict driver);
each event adds one to the count of its ``user_id``, as millpond's BenchCounter does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from pathlib import Path


def _usage() -> dict[str, float]:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": u.ru_utime + u.ru_stime, "maxrss_mb": u.ru_maxrss / 1024}


def count(spec: dict) -> dict:
    started = time.time()
    import faust

    app = faust.App(
        spec["group"], broker=f"kafka://{spec['bootstrap']}", store="rocksdb://",
        datadir=spec["state_dir"], processing_guarantee=spec["guarantee"],
        broker_commit_interval=float(spec["commit_interval"]),
        topic_partitions=int(spec["partitions"]), consumer_auto_offset_reset="earliest",
        web_enabled=False, table_standby_replicas=0, **spec.get("settings", {}),
    )
    topic = app.topic(spec["topic"], key_type=str, value_serializer="json",
                      partitions=int(spec["partitions"]))
    counts = app.Table("counts", default=int, partitions=int(spec["partitions"]))
    total = int(spec["messages"])
    marks: dict[str, float] = {}
    state = {"n": 0}
    worker = None

    async def stop() -> None:
        assert worker is not None
        await worker.stop()
        marks["stopped"] = time.time()

    @app.agent(topic)
    async def counter(stream):  # type: ignore[no-untyped-def]
        async for event in stream:
            if state["n"] == 0:
                marks["first_message"] = time.time()
            counts[event["user_id"]] += 1
            state["n"] += 1
            if state["n"] == total:
                marks["last_message"] = time.time()
                asyncio.ensure_future(stop())

    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    logging.getLogger("faust").setLevel(logging.WARNING)
    try:
        worker.execute_from_commandline()
    except SystemExit:
        pass
    ended = time.time()
    return {"started": started, "first_message": marks.get("first_message"),
            "last_message": marks.get("last_message"), "stopped": marks.get("stopped"),
            "ended": ended, "processed": state["n"], **_usage()}


def dump(spec: dict) -> dict:
    """Every count in the table's RocksDB partitions (keys and values as Faust wrote them)."""
    from rocksdict import AccessType, Options, Rdict

    counts: dict[str, int] = {}
    dbs = []
    for current in sorted(Path(spec["state_dir"]).rglob("CURRENT")):
        db_dir = current.parent
        if "counts" not in str(db_dir):
            continue
        dbs.append(str(db_dir))
        db = Rdict(str(db_dir), Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            for key, value in db.items():
                if key.startswith(b"__faust"):
                    continue  # the store's own offset key
                user = key.decode()
                if user.startswith('"'):
                    user = json.loads(user)
                counts[user] = json.loads(value)
        finally:
            db.close()
    return {"counts": counts, "dbs": dbs}


if __name__ == "__main__":
    from peer_main import main  # this directory, first on sys.path when run as a script

    main({"count": count, "dump": dump}, ("faust-streaming", "aiokafka", "rocksdict"))

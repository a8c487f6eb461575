"""A record the dead-letter policy skips leaves no trace in a dataflow's operators: not in
their stores (the skip undo) and not in the stream time they keep in memory. A skipped
record far ahead in event time must not close windows or fire timers early.

Each case runs a real job (`millpond run --bounded`, ``task.dlq.stream`` set) over one
partition per input, one of whose records raises after a window, timer or join operator saw
its time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.kafka_util import create_topic, read_topic, run_job, write_properties

pytestmark = pytest.mark.kafka

WINDOW_APP = """\
from millpond.streams import App
app = App()
(app.source({left!r})
    .tumbling_window(1000, timestamp=lambda v: v["t"])
    .sum("totals", by=lambda v: v["n"])
    .final()
    .to({out!r}))
"""

TIMER_APP = """\
from millpond.streams import App

def on_record(ctx, v):
    if v == "bad":
        raise ValueError("a bad record")
    ctx.state = (ctx.state or []) + [v]
    ctx.set_timer(ctx.timestamp + 1000)

def on_timer(ctx, timer):
    if ctx.state is not None:
        ctx.emit(ctx.state)
        ctx.state = None

app = App()
app.source({left!r}).process("buffer", on_record, on_timer).to({out!r})
"""

# The left record goes to the join first (its side's stream time moves, the right side's
# records expire), then to the peek, which raises for n == 0.
JOIN_APP = """\
from millpond.streams import App
app = App()
left, right = app.source({left!r}), app.source({right!r})
(left.window_join("pairs", right, 1000, lambda l, r: [l["n"], r["n"]],
                  timestamp=lambda v: v["t"])
    .to({out!r}))
left.peek(lambda k, v: 1 // v["n"])
"""

BASE = (int(time.time() * 1000) - 3 * 3_600_000) // 1000 * 1000  # 3 h ago, whole seconds

# (app, runs of records as (side, value, Kafka timestamp), the bad record, what the job
# must send); the job runs (--bounded) after each run of records is produced.
CASES: dict[str, tuple[str, list[list[tuple[str, Any, int]]], Any, list[Any]]] = {
    # event time from the value: the bad record's sum fails after its time 10^7 was seen;
    # the window [1000, 2000) must still take the record at 1800 and close at 2500.
    "window": (WINDOW_APP,
               [[("L", {"t": 1000, "n": 1}, BASE), ("L", {"t": 1500, "n": 2}, BASE),
                 ("L", {"t": 10_000_000, "n": "bad"}, BASE), ("L", {"t": 1800, "n": 4}, BASE),
                 ("L", {"t": 2500, "n": 8}, BASE)]],
               {"t": 10_000_000, "n": "bad"},
               [{"start": 1000, "end": 2000, "value": 7}]),
    # the Kafka timestamp: the bad record, 2 h ahead, raises after the clock saw it; the
    # timer at BASE + 1000 must fire only at the record of BASE + 5000, with all four.
    "timer": (TIMER_APP,
              [[("L", "a", BASE), ("L", "b", BASE + 100), ("L", "bad", BASE + 2 * 3_600_000),
                ("L", "c", BASE + 500), ("L", "d", BASE + 5000)]],
              "bad",
              [["a", "b", "c", "d"]]),
    # the right record waits first; the bad left record at 10^7 must neither expire it nor
    # make the left records after it late.
    "join": (JOIN_APP,
             [[("R", {"t": 1000, "n": 5}, BASE)],
              [("L", {"t": 1500, "n": 1}, BASE), ("L", {"t": 10_000_000, "n": 0}, BASE),
               ("L", {"t": 1600, "n": 2}, BASE)]],
             {"t": 10_000_000, "n": 0},
             [[1, 5], [2, 5]]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_skipped_record_does_not_move_stream_time(
        case: str, kafka_bootstrap: str, topic_name: Callable[[str], str],
        tmp_path: Path) -> None:
    app, runs, bad, expected = CASES[case]
    topics = {"L": topic_name("left"), "R": topic_name("right")}
    out, dlq = topic_name("out"), topic_name("dead")
    for topic in (*topics.values(), out, dlq):
        create_topic(kafka_bootstrap, topic, 1)
    (tmp_path / f"skip_{case}_app.py").write_text(
        app.format(left=topics["L"], right=topics["R"], out=out))
    conf = write_properties(tmp_path / "app.properties", {
        "job.name": topic_name("app"),
        "app.class": f"skip_{case}_app:app",
        "task.commit.ms": 500,
        "task.dlq.stream": f"kafka.{dlq}",
        "systems.kafka.bootstrap.servers": kafka_bootstrap,
        "systems.kafka.samza.key.serde": "string",
        "systems.kafka.samza.msg.serde": "json",
        "job.logged.store.base.dir": str(tmp_path / "state"),
    })
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    logs = []  # each run's stderr, shown when the output is wrong
    for records in runs:
        for side, value, timestamp in records:
            producer.produce(topics[side], json.dumps(value).encode(), b"k", timestamp=timestamp)
        assert producer.flush(30) == 0
        done = run_job(conf, "--bounded", env={"PYTHONPATH": str(tmp_path)}, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "late records" not in done.stderr, done.stderr[-3000:]
        logs.append(done.stderr[-3000:])
    [dead] = read_topic(kafka_bootstrap, dlq)
    assert json.loads(dead.value()) == bad
    sent = [json.loads(m.value()) for m in read_topic(kafka_bootstrap, out)]
    assert sent == expected, "\n---\n".join(logs)

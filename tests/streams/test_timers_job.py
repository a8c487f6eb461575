"""A keyed ``process`` operator with event-time timers run by `millpond run`: its timers are
committed with its state, come back after a SIGKILL, and each fires once in effect; records'
timestamps reach the output. The job's output equals the test driver's on the same records."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from millpond.streams import TestDriver
from tests.kafka_util import create_topic, read_stable, read_topic, run_job, start_job
from tests.streams.test_app_job import _cli, _config, _dump

pytestmark = pytest.mark.kafka

PARTITIONS = 2
APP = '''
from millpond.streams import App

GAP = 100

def on_view(ctx, view):
    state = ctx.state or {"n": 0, "end": 0}
    if state["end"]:
        ctx.cancel_timer(state["end"])
    state = {"n": state["n"] + 1, "end": ctx.timestamp + GAP}
    ctx.state = state
    ctx.set_timer(state["end"])

def on_timer(ctx, timer):
    ctx.emit({"views": ctx.state["n"], "closed": timer.time})
    ctx.state = None

def build(source, out):
    app = App()
    app.source(source).process("sessions", on_view, on_timer).to(out)
    return app
'''


def test_sessions_close_once_across_a_sigkill(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    source, out = topic_name("views"), topic_name("sessions")
    create_topic(kafka_bootstrap, source, PARTITIONS)
    create_topic(kafka_bootstrap, out, PARTITIONS)
    (tmp_path / "sessions_app.py").write_text(
        APP + f"app = build({source!r}, {out!r})\n")
    # 6000 views of 30 users, 20 ms apart in event time, users in bursts so sessions close
    # (6000, not 2000: once a loaded CI machine processed all 2000 before the first commit)
    records: list[tuple[int, str, int]] = []  # partition, user, timestamp
    t = int(time.time() * 1000) - 3_600_000  # an hour ago: within the topics' retention
    for i in range(6000):
        user = f"user-{(i // 7) % 30}"
        t += 20 if i % 50 else 400  # a pause now and then closes every open session
        records.append((hash(user) % PARTITIONS, user, t))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    for partition, user, ts in records:
        producer.produce(source, b"{}", user.encode(), partition=partition, timestamp=ts)
    assert producer.flush(30) == 0
    # What the test driver says, per partition (stream time is each task's own)
    import importlib.util

    spec = importlib.util.spec_from_file_location("sessions_app_ref", tmp_path / "sessions_app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected: list[tuple[str, dict[str, int], int]] = []
    remaining: dict[str, object] = {}
    for p in range(PARTITIONS):
        driver = TestDriver(module.build(source, out))
        driver.pipe_all(source, [(u, {}, ts) for part, u, ts in records if part == p])
        expected += driver.read(out, timestamps=True)
        remaining.update(driver.state("sessions"))
    assert len(expected) > 100 and remaining

    conf = _config(tmp_path / "app.properties", kafka_bootstrap, topic_name("app"),
                   tmp_path / "state", **{"app.class": "sessions_app:app",
                                          "task.commit.ms": "50",
                                          "task.processing.guarantee": "exactly-once",
                                          # a restarted process takes its tasks back at once
                                          # (a static member), not after the dead one's session
                                          "systems.kafka.consumer.group.instance.id": "p1",
                                          "systems.kafka.consumer.session.timeout.ms": "10000"})
    env = {"PYTHONPATH": str(tmp_path)}
    # ``:moved``: the first commit that moves a task's input (one polled batch, at most 1000
    # of the 6000 records), so the kill lands mid-stream however slowly the job starts
    killed = run_job(conf, "--bounded", env={**env, "MILLPOND_CRASH_AT":
                                             "after-transaction-commit:1:moved"}, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    shown = _cli(env, "checkpoint", "show", "--config", str(conf), "--format", "json")
    committed = sum(c["inputs"].get(source, 0) for c in json.loads(shown.stdout or "{}").values())
    assert 0 < committed < len(records), f"the kill was not mid-stream: {committed}"
    done = run_job(conf, "--bounded", env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = [(m.key().decode(), json.loads(m.value()), m.timestamp()[1])
            for m in read_topic(kafka_bootstrap, out)]
    assert sorted(seen, key=repr) == sorted(expected, key=repr)  # each session once
    assert _dump(conf, env, "sessions") == remaining
    timers = _dump(conf, env, "sessions-timers")
    assert {key for key in timers if key.startswith("e|")} == {
        f'e|{state["end"]:016d}|{json.dumps(user)}' for user, state in remaining.items()}


def test_processing_time_timers_fire_in_a_running_job(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """A processing-time timer set 300 ms ahead fires while the job runs (its window(),
    every task.window.ms) and is gone from the timer store after it fired."""
    source, out = topic_name("in"), topic_name("out")
    create_topic(kafka_bootstrap, source, 1)
    create_topic(kafka_bootstrap, out, 1)
    (tmp_path / "wall_app.py").write_text(
        "from millpond.streams import App\n"
        "def add(ctx, v):\n"
        "    ctx.state = (ctx.state or 0) + v\n"
        "    ctx.set_timer(ctx.now() // 1000 * 1000 + 1000, processing_time=True)\n"
        "def report(ctx, timer):\n"
        "    ctx.emit({'total': ctx.state, 'at': timer.time, 'late_ms': ctx.now() - timer.time})\n"
        "app = App()\n"
        f"app.source({source!r}).process('totals', add, report).to({out!r})\n")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(10):
        producer.produce(source, b"2", b"k")
    assert producer.flush(30) == 0
    conf = _config(tmp_path / "app.properties", kafka_bootstrap, topic_name("app"),
                   tmp_path / "state", **{"app.class": "wall_app:app",
                                          "systems.kafka.samza.msg.serde": "json"})
    job = start_job(conf, env={"PYTHONPATH": str(tmp_path)})
    try:
        deadline, fired = time.monotonic() + 60, []
        while not fired and time.monotonic() < deadline and job.poll() is None:
            fired = read_stable(kafka_bootstrap, out)
        assert fired, "no timer fired within 60 s"
    finally:
        job.send_signal(signal.SIGTERM)
        log = job.communicate(timeout=60)[0]
    assert job.returncode == 0, log[-3000:]
    values = [json.loads(m.value()) for m in fired]
    assert all(v["total"] == 20 and v["at"] % 1000 == 0 for v in values), values
    assert all(0 <= v["late_ms"] < 2000 for v in values), values  # window() is 100 ms apart
    assert not [k for k in _dump(conf, {"PYTHONPATH": str(tmp_path)}, "totals-timers")
                if k.startswith("p|")]


def test_a_failing_on_timer_stops_the_job_and_the_timer_fires_after_the_restart(
    kafka_bootstrap: str, topic_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """on_timer raises (while a flag file exists): even with a dead-letter topic the job stops
    naming the operator, key and time, and dead-letters nothing; once fixed, the restarted job
    fires the timer (its removal was never committed)."""
    source, out, dlq = topic_name("in"), topic_name("out"), topic_name("dead")
    for topic in (source, out, dlq):
        create_topic(kafka_bootstrap, topic, 1)
    flag = tmp_path / "broken"
    flag.touch()
    (tmp_path / "flaky_app.py").write_text(
        "import os\n"
        "from millpond.streams import App\n"
        "def on_record(ctx, v):\n"
        "    ctx.state = v\n"
        "    ctx.set_timer(ctx.timestamp)\n"
        "def on_timer(ctx, timer):\n"
        f"    if os.path.exists({str(flag)!r}):\n"
        "        raise RuntimeError('broken')\n"
        "    ctx.emit(ctx.state)\n"
        "app = App()\n"
        f"app.source({source!r}).process('flaky', on_record, on_timer).to({out!r})\n")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(source, b'"v"', b"k", timestamp=int(time.time() * 1000))
    assert producer.flush(30) == 0
    conf = _config(tmp_path / "app.properties", kafka_bootstrap, topic_name("app"),
                   tmp_path / "state", **{"app.class": "flaky_app:app",
                                          "task.dlq.stream": f"kafka.{dlq}",
                                          "task.processing.guarantee": "exactly-once"})
    env = {"PYTHONPATH": str(tmp_path)}
    failed = run_job(conf, "--bounded", env=env, timeout=120)
    errors = [line for line in failed.stderr.splitlines() if line.startswith("Error:")]
    assert failed.returncode == 2 and len(errors) == 1, failed.stderr[-3000:]
    assert "operator flaky on_timer (key 'k', time" in errors[0] and "broken" in errors[0]
    assert read_topic(kafka_bootstrap, dlq) == [] and read_topic(kafka_bootstrap, out) == []
    flag.unlink()
    done = run_job(conf, "--bounded", env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [m.value() for m in read_topic(kafka_bootstrap, out)] == [b'"v"']

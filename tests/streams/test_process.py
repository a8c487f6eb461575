"""The keyed ``process`` operator and its timers, run by the test driver: the state handle,
event-time timers fired by stream time, processing-time timers by the clock, timestamps
carried to outputs and through a key_by."""

from __future__ import annotations

from typing import Any

import pytest

from millpond.streams import App, DataflowError, OperatorError, TestDriver, TimerError
from millpond.streams.runtime import Context
from millpond.streams.timers import Timer


def _sessions(gap: int) -> App:
    """Per user: count views until ``gap`` ms pass without one (event time), then emit the
    session's count and forget it."""
    app = App()

    def on_view(ctx: Context, view: Any) -> None:
        state = ctx.state or {"n": 0, "end": 0}
        if state["end"]:
            ctx.cancel_timer(state["end"])
        state = {"n": state["n"] + 1, "end": ctx.timestamp + gap}
        ctx.state = state
        ctx.set_timer(state["end"])

    def on_timer(ctx: Context, timer: Timer) -> None:
        ctx.emit({"views": ctx.state["n"], "closed": timer.time})
        ctx.state = None

    app.source("views").process("sessions", on_view, on_timer).to("session-counts")
    return app


def test_event_time_timers_fire_when_stream_time_passes_them() -> None:
    driver = TestDriver(_sessions(gap=100))
    driver.pipe_all("views", [("a", {}, 1000), ("b", {}, 1010), ("a", {}, 1050)])
    assert driver.read("session-counts") == []
    assert driver.state("sessions") == {"a": {"n": 2, "end": 1150}, "b": {"n": 1, "end": 1110}}
    driver.pipe("views", "c", {}, 1120)  # stream time 1120: b's session (1110) closes
    assert driver.read("session-counts", timestamps=True) == [
        ("b", {"views": 1, "closed": 1110}, 1110)]
    driver.pipe("views", "c", {}, 1500)  # a's (1150) and c's first (1220) close, in time order
    assert driver.read("session-counts") == [("a", {"views": 2, "closed": 1150})]
    assert driver.state("sessions") == {"c": {"n": 2, "end": 1600}}
    # the cancelled timer (a at 1100) never fired; the store keeps one timer and the clock
    timers = driver.state("sessions-timers")
    assert timers == {"s|stream-time": 1500, 'e|0000000000001600|"c"': [1600, "c"]}


def test_a_late_record_does_not_move_stream_time_back() -> None:
    driver = TestDriver(_sessions(gap=100))
    driver.pipe("views", "a", {}, 5000)
    driver.pipe("views", "b", {}, 1000)  # late: its timer (1100) is due at once
    assert driver.read("session-counts") == [("b", {"views": 1, "closed": 1100})]
    assert driver.clock.stream_time == 5000


def test_processing_time_timers_fire_as_the_clock_advances() -> None:
    app = App()

    def on_record(ctx: Context, value: Any) -> None:
        ctx.state = (ctx.state or 0) + value
        ctx.set_timer(ctx.now() + 1000, processing_time=True)

    def on_timer(ctx: Context, timer: Timer) -> None:
        assert timer.processing_time
        ctx.emit(ctx.state)

    app.source("in").process("totals", on_record, on_timer).to("out")
    driver = TestDriver(app, start_time=10_000)
    driver.pipe("in", "k", 5)
    driver.advance_time(500)
    driver.pipe("in", "k", 7)  # a second timer, at 11_500
    driver.advance_time(499)
    assert driver.read("out") == []
    driver.advance_time(1)  # 11_000
    assert driver.read("out", timestamps=True) == [("k", 12, 11_000)]
    driver.advance_time(10_000)
    assert driver.read("out") == [("k", 12)]


def test_timers_set_during_a_timer_at_a_due_time_fire_in_the_same_round() -> None:
    app = App()

    def on_record(ctx: Context, value: Any) -> None:
        ctx.set_timer(ctx.timestamp)

    def on_timer(ctx: Context, timer: Timer) -> None:
        ctx.emit(timer.time)
        if timer.time < 103:
            ctx.set_timer(timer.time + 1)

    app.source("in").process("chain", on_record, on_timer).to("out")
    driver = TestDriver(app)
    driver.pipe("in", "k", None, 100)
    assert driver.read("out") == [("k", 100)]  # due at once; the one it sets (101) is not
    driver.pipe("in", "x", None, 105)
    assert driver.read("out") == [("k", 101), ("k", 102), ("k", 103), ("x", 105)]


def test_timestamps_travel_through_key_by_and_map() -> None:
    app = App()
    (app.source("in").map(lambda v: v * 2).key_by("by-value", lambda v: str(v))
     .count("counts").to("out"))
    driver = TestDriver(app)
    driver.pipe("in", "a", 1, 111)
    driver.pipe("in", "b", 1, 222)
    assert driver.read("out", timestamps=True) == [("2", 1, 111), ("2", 2, 222)]


def test_process_errors_name_the_operator_and_the_callback() -> None:
    app = App()

    def on_timer(ctx: Context, timer: Timer) -> None:
        raise KeyError("gone")

    app.source("in").process("p", lambda ctx, v: ctx.set_timer(v), on_timer).to("out")
    driver = TestDriver(app)
    with pytest.raises(OperatorError, match="operator p raised DataflowError: a timer.s time must be an int"):
        driver.pipe("in", "k", -1, 5)  # a negative timer time
    with pytest.raises(TimerError, match=r"operator p on_timer \(key 'k', time 5\) raised "
                       "KeyError"):  # not the record's fault: never dead-lettered with it
        driver.pipe("in", "k", 5, 5)


def test_a_process_operator_reserves_its_timer_store_name() -> None:
    app = App()
    app.source("in").process("p", lambda ctx, v: None).to("out")
    with pytest.raises(DataflowError, match="p-timers"):
        app.source("in").count("p-timers")
    with pytest.raises(DataflowError, match="on_record and on_timer must be functions"):
        app.source("in").process("q", "not a function")  # type: ignore[arg-type]


def test_pipe_applies_an_operator_written_as_a_function() -> None:
    def dedupe(stream: Any, name: str) -> Any:
        def first_only(ctx: Context, value: Any) -> None:
            if ctx.state is None:
                ctx.state = True
                ctx.emit(value)
        return stream.process(name, first_only)

    app = App()
    app.source("in").pipe(dedupe, "seen").map_values(str.upper).to("out")
    driver = TestDriver(app)
    driver.pipe_all("in", [("a", "x"), ("a", "y"), ("b", "z")])
    assert driver.read("out") == [("a", "X"), ("b", "Z")]
    with pytest.raises(DataflowError, match="returned a int"):
        app.source("in").pipe(lambda s: 1)


def test_a_process_operator_compiles_to_its_store_and_timer_store() -> None:
    from millpond.config import Config, parse_properties
    from millpond.streams import describe
    from millpond.streams.compile import compile_properties, with_app
    from tests.streams.apps import timed

    base = ("job.name=pv\napp.class=tests.streams.apps:timed\n"
            "systems.kafka.bootstrap.servers=127.0.0.1:1\n"
            "systems.kafka.samza.key.serde=string\nsystems.kafka.samza.msg.serde=json\n")
    # only the TTL set: the compiled defaults fill in the rest of the store
    config = Config.from_properties(compile_properties(parse_properties(
        base + "stores.last-view.rocksdb.ttl.ms=60000\n", "p")))
    state, timers = config.stores["last-view"], config.stores["last-view-timers"]
    assert (state.factory, state.key_serde, state.msg_serde) == ("rocksdb", "string", "json")
    assert config.get("stores.last-view.rocksdb.ttl.ms") == "60000"  # the user's key, kept
    assert state.changelog is not None and state.changelog.topic == "pv-1-last-view-changelog"
    assert (timers.key_serde, timers.msg_serde) == ("string", "json")
    assert timers.changelog is not None
    assert timers.changelog.topic == "pv-1-last-view-timers-changelog"
    assert config.job.window_ms == 100  # processing-time timers are looked at this often
    assert with_app(Config.from_properties(parse_properties(
        base + "task.window.ms=250\n", "p"))).job.window_ms == 250
    assert "(store last-view, changelog pv-1-last-view-changelog, timers in store " \
        "last-view-timers)" in describe.text(timed, config)


def test_a_stream_time_of_zero_is_read_back_as_zero_after_a_restart() -> None:
    app = App()

    def on_record(ctx: Context, value: Any) -> None:
        ctx.set_timer(ctx.now() + 1000, processing_time=True)

    def on_timer(ctx: Context, timer: Timer) -> None:
        ctx.emit(ctx.stream_time)

    app.source("in").process("clock", on_record, on_timer).to("out")
    driver = TestDriver(app, start_time=10_000)
    driver.pipe("in", "k", 1, timestamp=0)  # the first record at event time 0
    again = driver.restarted()  # its timer and stream time come back from the stores
    again.advance_time(1000)
    assert again.read("out") == [("k", 0)]  # (read back as "none yet", -1, before)

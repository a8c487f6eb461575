"""Sliding windows in the test driver: each distinct time t of a key's records defines the
window [t - size, t] of the key's records, closed when stream time passes t + grace. Edge
cases: records exactly size apart, equal timestamps, out of order within grace (against a
brute-force reference, final and current), late records, a key that goes quiet, and a store
left with nothing of closed windows."""

from __future__ import annotations

import random
from typing import Any

import pytest

from millpond.streams import App, DataflowError, TestDriver, count, total

Rec = tuple[str, int, int]  # key, value, time


def _win(start: int, end: int, value: object) -> dict[str, object]:
    return {"start": start, "end": end, "value": value}


def _app(size: int, grace: int = 0, mode: str = "final") -> App:
    app = App()
    windowed = (app.source("v").sliding_window(size, grace_ms=grace, late_to="late")
                .agg("w", n=count(), s=total()))
    (windowed.final() if mode == "final" else windowed.current()).to("out")
    return app


def _reference(records: list[Rec], size: int) -> dict[tuple[str, int, int], dict[str, int]]:
    """(key, start, end) -> {n, s} of every window: one per distinct time of a key."""
    out = {}
    for key, t in {(k, t) for k, _, t in records}:
        inside = [v for k, v, at in records if k == key and t - size <= at <= t]
        out[(key, max(0, t - size), t)] = {"n": len(inside), "s": sum(inside)}
    return out


def _results(rows: list[tuple[Any, ...]]) -> dict[tuple[str, int, int], Any]:
    last = {}
    for key, win in rows:  # (current: the window's last update is its result)
        last[(key, win["start"], win["end"])] = win["value"]
    return last


def _window_keys(driver: TestDriver, key: str) -> list[str]:
    return [k for k in driver.state("w") if f'"{key}"' in k]


def test_final_sends_each_window_once_when_stream_time_passes_its_end() -> None:
    driver = TestDriver(_app(10))
    driver.pipe_all("v", [("k", 1, 0), ("k", 2, 5), ("k", 4, 10)])
    # [0, 0] and [0, 5] (their start is clamped to 0) closed as stream time passed 0 and 5
    assert driver.read("out", timestamps=True) == [
        ("k", _win(0, 0, {"n": 1, "s": 1}), 0), ("k", _win(0, 5, {"n": 2, "s": 3}), 5)]
    driver.pipe("v", "k", 8, 20)  # 10 and 20 are exactly size apart: both in [10, 20]
    driver.pipe("v", "j", 0, 21)
    assert driver.read("out", timestamps=True) == [
        ("k", _win(0, 10, {"n": 3, "s": 7}), 10),  # 0 is exactly size before 10: in
        ("k", _win(10, 20, {"n": 2, "s": 12}), 20)]  # 5 is not in [10, 20]


def test_equal_timestamps_share_one_window_that_closes_after_their_time() -> None:
    driver = TestDriver(_app(10))
    driver.pipe_all("v", [("k", 1, 50), ("k", 2, 50)])  # stream time 50: [40, 50] still open
    assert driver.read("out") == []
    driver.pipe("v", "k", 4, 50)
    driver.pipe("v", "k", 8, 51)
    assert driver.read("out") == [("k", _win(40, 50, {"n": 3, "s": 7}))]
    driver.pipe("v", "x", 0, 60)
    assert driver.read("out") == [("k", _win(41, 51, {"n": 4, "s": 15}))]


def test_current_sends_every_window_a_record_updates() -> None:
    driver = TestDriver(_app(10, grace=100, mode="current"))
    driver.pipe("v", "k", 1, 10)
    driver.pipe("v", "k", 2, 20)
    driver.pipe("v", "k", 4, 15)  # out of order: its own window [5, 15] and [10, 20]
    assert driver.read("out", timestamps=True) == [
        ("k", _win(0, 10, {"n": 1, "s": 1}), 10), ("k", _win(10, 20, {"n": 2, "s": 3}), 20),
        ("k", _win(5, 15, {"n": 2, "s": 5}), 15), ("k", _win(10, 20, {"n": 3, "s": 7}), 15)]


def test_late_records_update_no_window_and_go_to_late_to() -> None:
    driver = TestDriver(_app(10, grace=5))
    driver.pipe_all("v", [("k", 1, 100), ("k", 2, 110)])
    driver.pipe("v", "k", 4, 105)  # 5 behind: within grace, in [95, 105] and [100, 110]
    assert driver.read("out") == [("k", _win(90, 100, {"n": 1, "s": 1}))]  # closed at 106 < 110
    driver.pipe("v", "k", 8, 104)  # 6 behind: its window [94, 104] has closed: late
    assert driver.read("late", timestamps=True) == [("k", 8, 104)]
    assert driver.late_records == {"w": 1}
    driver.pipe("v", "j", 0, 200)
    assert driver.read("out") == [("k", _win(95, 105, {"n": 2, "s": 5})),
                                  ("k", _win(100, 110, {"n": 3, "s": 7}))]  # without the 8


def test_a_quiet_key_leaves_nothing_once_its_windows_close() -> None:
    driver = TestDriver(_app(100, grace=10))
    driver.pipe_all("v", [("quiet", 1, 1_000), ("quiet", 1, 1_050)])
    for t in range(1_000, 1_300, 7):  # another key moves stream time on
        driver.pipe("v", "busy", 1, t)
    assert _window_keys(driver, "quiet") == []  # 1 050 + 100 + 10 < 1 296: records gone too
    assert [w for k, w in driver.read("out") if k == "quiet"] == [
        _win(900, 1_000, {"n": 1, "s": 1}), _win(950, 1_050, {"n": 2, "s": 2})]


def test_closed_windows_and_expired_records_leave_no_state_behind() -> None:
    driver = TestDriver(_app(50))
    for i in range(20_000):  # 50 keys, a record each every 50 ms, each within 50 ms
        driver.pipe("v", f"user-{i % 50}", 1, i)
    # per key: its open window and the records of the last 50 ms (+ index), 3 clock keys
    assert len(driver.state("w")) <= 50 * (1 + 2 * 2) + 2
    assert len(driver.read("out")) == 20_000 - 1  # one window per record, the last open
    driver.pipe("v", "end", 0, 1_000_000)
    # only the last record's window, record and index entry, and the clock keys
    assert sorted(driver.state("w")) == [
        '0000000001000001|0000000000999950|"end"', "r|\"end\"|0000000001000000|0000000000020001",
        "x|0000000001000000|0000000000020001", "~seq", "~stream-time"]


@pytest.mark.parametrize("size,grace", [(10, 0), (25, 40), (100, 7)])
@pytest.mark.parametrize("mode", ["final", "current"])
def test_out_of_order_within_grace_equals_the_brute_force_windows(
        size: int, grace: int, mode: str) -> None:
    rng = random.Random(size * 7 + grace)
    records = [(f"k{rng.randrange(4)}", rng.randrange(10), rng.randrange(1_500))
               for _ in range(400)]
    records += [(k, 100, t) for k, _, t in records[:20]]  # equal timestamps of one key
    fed = sorted(records, key=lambda r: r[2] + rng.randrange(grace + 1))  # <= grace late
    driver = TestDriver(_app(size, grace, mode))
    for key, value, t in fed:
        driver.pipe("v", key, value, t)
    driver.pipe("v", "end", 0, 10_000_000)
    assert driver.late_records == {}
    got = _results([r for r in driver.read("out") if r[0] != "end"])
    assert got == _reference(records, size)


def test_bad_sizes_and_describe() -> None:
    from millpond.streams.describe import text

    with pytest.raises(DataflowError, match="a sliding window's size must be an int of "
                                            "milliseconds > 0, got 0"):
        App().source("v").sliding_window(0)
    with pytest.raises(DataflowError, match="grace_ms must be an int of milliseconds >= 0"):
        App().source("v").sliding_window(10, grace_ms=-1)
    with pytest.raises(DataflowError, match="early results are for tumbling and hopping"):
        App().source("v").sliding_window(10).count("c").final(early_every_records=2)
    assert "-> sliding window of 60000 ms, grace 5 ms, final: w (store w)" in text(
        _app(60_000, grace=5))

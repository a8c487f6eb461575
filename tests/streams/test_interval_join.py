"""Interval joins (Flink's) in the test driver: a left record at t joins right records of its
key at times in [t + lower, t + upper]. Edge cases: records exactly at t + lower and
t + upper, equal timestamps, intervals wholly after or before t, out of order within grace
in any interleaving (against a brute-force reference), expiry of each side and late
records."""

from __future__ import annotations

import random

import pytest

from millpond.streams import App, DataflowError, TestDriver

Rec = tuple[str, str, int]  # key, value, time


def _app(lower: int, upper: int, how: str = "inner", grace: int = 0) -> App:
    app = App()
    orders, payments = app.source("orders"), app.source("payments")
    (orders.interval_join("pay-join", payments, lower, upper, lambda o, p: [o, p], how=how,
                          grace_ms=grace, late_to="late")
     .to("out"))
    return app


def _reference(left: list[Rec], right: list[Rec], lower: int, upper: int,
               how: str) -> list[tuple[str, list[str | None]]]:
    pairs = [(k, lv, rv) for k, lv, lt in left for k2, rv, rt in right
             if k == k2 and lt + lower <= rt <= lt + upper]
    matched = {lv for _, lv, _ in pairs} | {rv for _, _, rv in pairs}
    out: list[tuple[str, list[str | None]]] = [(k, [lv, rv]) for k, lv, rv in pairs]
    if how in ("left", "outer"):
        out += [(k, [v, None]) for k, v, _ in left if v not in matched]
    if how == "outer":
        out += [(k, [None, v]) for k, v, _ in right if v not in matched]
    return sorted(out, key=repr)


def _run(feed: list[tuple[str, Rec]], lower: int, upper: int, how: str,
         grace: int) -> list[tuple[str, list[str | None]]]:
    driver = TestDriver(_app(lower, upper, how, grace))
    for topic, (key, value, t) in feed:
        driver.pipe(topic, key, value, t)
    driver.pipe("payments", "end", "end", 10_000_000)  # both stream times far on: all expire
    driver.pipe("orders", "end", "end", 10_000_000)
    assert driver.late_records == {}
    left_over = {k for k in driver.state("pay-join") if k[0] not in "x~"}
    assert {k.split("|")[0] for k in left_over} <= {'"end"'}  # nothing else is kept
    return sorted([r for r in driver.read("out") if r[0] != "end"], key=repr)


def test_the_interval_includes_both_ends_exactly() -> None:
    driver = TestDriver(_app(-5, 10))
    driver.pipe("orders", "k", "o", 100)
    for value, t in [("p94", 94), ("p95", 95), ("p100", 100), ("p110", 110), ("p111", 111)]:
        driver.pipe("payments", "k", value, t)
    # 95 = t + lower and 110 = t + upper join; 94 and 111 are just outside
    assert driver.read("out", timestamps=True) == [
        ("k", ["o", "p95"], 100), ("k", ["o", "p100"], 100), ("k", ["o", "p110"], 110)]
    # the right side's view: a payment at 110 joins orders at [110 - 10, 110 + 5]
    driver.pipe("orders", "k", "o115", 115)  # 110 is its t - 5: joins p110 (and p111)
    driver.pipe("orders", "k", "o116", 116)  # 110 is t - 6: no (111 is t - 5: yes)
    assert driver.read("out") == [("k", ["o115", "p110"]), ("k", ["o115", "p111"]),
                                  ("k", ["o116", "p111"])]


def test_equal_timestamps_join_every_pair_in_a_zero_interval() -> None:
    driver = TestDriver(_app(0, 0))
    driver.pipe_all("orders", [("k", "o1", 50), ("k", "o2", 50), ("j", "oj", 50)])
    driver.pipe_all("payments", [("k", "p1", 50), ("k", "p2", 50), ("k", "p3", 51)])
    assert driver.read("out", timestamps=True) == [
        ("k", ["o1", "p1"], 50), ("k", ["o2", "p1"], 50),
        ("k", ["o1", "p2"], 50), ("k", ["o2", "p2"], 50)]


def test_an_interval_wholly_after_or_before_the_left_record() -> None:
    after = TestDriver(_app(2, 5))  # a payment 2 to 5 ms after the order
    after.pipe("payments", "k", "p-before", 99)
    after.pipe("orders", "k", "o", 100)
    after.pipe_all("payments", [("k", "p+1", 101), ("k", "p+2", 102), ("k", "p+5", 105),
                                ("k", "p+6", 106)])
    assert after.read("out") == [("k", ["o", "p+2"]), ("k", ["o", "p+5"])]
    before = TestDriver(_app(-10, -3))  # a payment 3 to 10 ms before the order
    before.pipe_all("payments", [("k", "p-11", 89), ("k", "p-10", 90), ("k", "p-3", 97),
                                 ("k", "p-2", 98), ("k", "p0", 100)])
    before.pipe("orders", "k", "o", 100)
    assert before.read("out") == [("k", ["o", "p-10"]), ("k", ["o", "p-3"])]


def test_each_side_expires_when_the_other_sides_stream_time_passes_its_reach() -> None:
    driver = TestDriver(_app(-5, 10, how="outer", grace=3))
    driver.pipe("orders", "a", "o-alone", 100)  # reaches payments up to 110: waits to 113
    driver.pipe("payments", "b", "p-alone", 100)  # reaches orders up to 105: waits to 108
    driver.pipe("payments", "z", "p", 113)
    assert driver.read("out") == []  # 113 is not past 100 + 10 + 3
    driver.pipe("payments", "z", "p", 114)
    assert driver.read("out", timestamps=True) == [("a", ["o-alone", None], 100)]
    driver.pipe("orders", "y", "o", 108)
    assert driver.read("out") == []  # 108 is not past 100 + 5 + 3
    driver.pipe("orders", "x", "o", 109)
    assert driver.read("out", timestamps=True) == [("b", [None, "p-alone"], 100)]


def test_late_records_are_counted_and_sent_to_late_to() -> None:
    driver = TestDriver(_app(-5, 10, how="left", grace=3))
    driver.pipe("orders", "k", "o1", 100)
    driver.pipe("orders", "k", "o2", 97)  # 3 behind the orders' stream time: within grace
    driver.pipe("orders", "k", "o3", 96)  # 4 behind: late, not joined nor sent unmatched
    driver.pipe("payments", "k", "p", 101)
    assert driver.read("out") == [("k", ["o2", "p"]), ("k", ["o1", "p"])]  # in time order
    driver.pipe("payments", "k", "p2", 120)
    driver.pipe("payments", "k", "p3", 116)  # 4 behind the payments' stream time: late
    assert driver.read("out") == []
    assert driver.read("late", timestamps=True) == [("k", "o3", 96), ("k", "p3", 116)]
    assert driver.late_records == {"pay-join": 2}


@pytest.mark.parametrize("lower,upper", [(-25, 25), (-40, 5), (0, 30), (7, 19), (-30, -10),
                                         (0, 0)])
@pytest.mark.parametrize("how", ["inner", "left", "outer"])
def test_out_of_order_within_grace_in_any_interleaving_equals_the_reference(
        lower: int, upper: int, how: str) -> None:
    rng = random.Random(lower * 31 + upper)
    grace = 50
    left = [(f"k{rng.randrange(4)}", f"l{i}", rng.randrange(2_000)) for i in range(150)]
    right = [(f"k{rng.randrange(4)}", f"r{i}", rng.randrange(2_000)) for i in range(150)]
    expected = _reference(left, right, lower, upper, how)

    def disordered(records: list[Rec]) -> list[Rec]:  # each record at most `grace` late
        return sorted(records, key=lambda r: r[2] + rng.randrange(grace + 1))

    lefts = [("orders", r) for r in disordered(left)]
    rights = [("payments", r) for r in disordered(right)]
    mixed = [*lefts, *rights]
    rng.shuffle(mixed)  # each input keeps its order: merge the shuffled positions back
    it_l, it_r = iter(lefts), iter(rights)
    interleaved = [next(it_l) if topic == "orders" else next(it_r) for topic, _ in mixed]
    for feed in (lefts + rights, rights + lefts, interleaved):
        assert _run(feed, lower, upper, how, grace) == expected


def test_a_window_join_is_the_symmetric_interval_join() -> None:
    rng = random.Random(11)
    left = [(f"k{rng.randrange(3)}", f"l{i}", rng.randrange(1_000)) for i in range(100)]
    right = [(f"k{rng.randrange(3)}", f"r{i}", rng.randrange(1_000)) for i in range(100)]
    feed = sorted([("orders", r) for r in left] + [("payments", r) for r in right],
                  key=lambda f: f[1][2])
    app = App()
    orders, payments = app.source("orders"), app.source("payments")
    orders.window_join("w", payments, 20, lambda o, p: [o, p], how="outer").to("out")
    driver = TestDriver(app)
    for topic, (key, value, t) in feed:
        driver.pipe(topic, key, value, t)
    driver.pipe("payments", "end", "end", 10_000_000)
    driver.pipe("orders", "end", "end", 10_000_000)
    window = sorted([r for r in driver.read("out") if r[0] != "end"], key=repr)
    assert window == _run(feed, -20, 20, "outer", 0) == _reference(left, right, -20, 20,
                                                                     "outer")


def test_bad_arguments_say_what_was_wrong() -> None:
    app = App()
    a, b = app.source("a"), app.source("b")

    def fn(x: object, y: object) -> object:
        return x

    with pytest.raises(DataflowError, match=r"interval_join 'j': lower_ms \(5\) must not "
                                            r"exceed upper_ms \(-5\)"):
        a.interval_join("j", b, 5, -5, fn)
    with pytest.raises(DataflowError, match="interval_join 'j': upper_ms must be an int"):
        a.interval_join("j", b, 0, 1.5, fn)  # type: ignore[arg-type]
    with pytest.raises(DataflowError, match="interval_join 'j': grace_ms must be an int"):
        a.interval_join("j", b, 0, 1, fn, grace_ms=-1)
    with pytest.raises(DataflowError, match="interval_join 'j': how='full'"):
        a.interval_join("j", b, 0, 1, fn, how="full")
    with pytest.raises(DataflowError, match="interval_join 'j': fn must be a function"):
        a.interval_join("j", b, 0, 1, None)  # type: ignore[arg-type]
    with pytest.raises(DataflowError, match="interval_join 'j': other must be a stream"):
        a.interval_join("j", "b", 0, 1, fn)  # type: ignore[arg-type]


def test_describe_shows_the_interval() -> None:
    from millpond.streams.describe import text

    assert "left interval join [t-5, t+10] ms, grace 3 ms: pay-join (store pay-join)" in text(
        _app(-5, 10, how="left", grace=3))

"""Time windows in the test driver: tumbling and hopping, final and current results, grace,
late records (dropped and counted, or sent to a topic), event time from the value, and a
store that keeps nothing of closed windows. Edge cases: a record exactly on a boundary,
equal timestamps, out of order within grace."""

from __future__ import annotations

import random

import pytest

from millpond.streams import App, DataflowError, OperatorError, TestDriver, count, total


def _win(start: int, end: int, value: object) -> dict[str, object]:
    return {"start": start, "end": end, "value": value}


def test_tumbling_final_emits_each_window_once_when_stream_time_passes_its_end() -> None:
    app = App()
    app.source("views").tumbling_window(10).count("per-10").final().to("out")
    driver = TestDriver(app)
    driver.pipe_all("views", [("a", {}, 0), ("a", {}, 5), ("b", {}, 9), ("a", {}, 9)])
    assert driver.read("out") == []  # stream time 9: [0, 10) still open
    driver.pipe("views", "a", {}, 10)  # exactly on the boundary: the next window; closes [0, 10)
    assert driver.read("out", timestamps=True) == [
        ("a", _win(0, 10, 3), 9), ("b", _win(0, 10, 1), 9)]  # by key; the window's last ms
    driver.pipe("views", "b", {}, 35)  # closes [10, 20); [20, 30) never had a record
    assert driver.read("out") == [("a", _win(10, 20, 1))]
    assert driver.state("per-10") == {"~stream-time": 35, '0000000000000040|0000000000000030|"b"': 1}


def test_grace_keeps_a_window_open_for_out_of_order_records_then_they_are_late() -> None:
    app = App()
    (app.source("views").tumbling_window(10, grace_ms=5, late_to="late").sum("total")
     .final().to("out"))
    driver = TestDriver(app)
    driver.pipe_all("views", [("k", 1, 8), ("k", 2, 12), ("k", 4, 9)])  # 9: within grace
    assert driver.read("out") == []
    driver.pipe("views", "k", 8, 15)  # stream time 15 = end 10 + grace 5: [0, 10) closes
    assert driver.read("out") == [("k", _win(0, 10, 5))]
    driver.pipe("views", "k", 16, 7)  # [0, 10) has closed: late
    assert driver.read("late", timestamps=True) == [("k", 16, 7)]
    assert driver.late_records == {"total": 1}
    driver.pipe("views", "k", 0, 30)
    assert driver.read("out") == [("k", _win(10, 20, 10))]  # 2 + 8; the late 16 is not in it


def test_late_records_without_a_topic_are_dropped_and_counted() -> None:
    app = App()
    app.source("v").tumbling_window(10).count("c").final().to("out")
    driver = TestDriver(app)
    # stream time 20: [10, 20) has closed (grace 0) though it never had a record
    driver.pipe_all("v", [("k", None, 20), ("k", None, 3), ("k", None, 19), ("k", None, 21)])
    assert driver.late_records == {"c": 2}
    assert driver.read("out") == []
    assert driver.state("c")['0000000000000030|0000000000000020|"k"'] == 2


def test_current_emits_every_update_and_closing_only_deletes() -> None:
    app = App()
    app.source("v").tumbling_window(10).count("c").current().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", None, 1), ("k", None, 2), ("j", None, 2), ("k", None, 11)])
    assert driver.read("out", timestamps=True) == [
        ("k", _win(0, 10, 1), 1), ("k", _win(0, 10, 2), 2), ("j", _win(0, 10, 1), 2),
        ("k", _win(10, 20, 1), 11)]
    assert set(driver.state("c")) == {"~stream-time", '0000000000000020|0000000000000010|"k"'}


def test_hopping_windows_each_take_the_record() -> None:
    app = App()
    app.source("v").hopping_window(10, 5).count("c").final().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", None, 7), ("k", None, 7), ("k", None, 12), ("k", None, 40)])
    # 7 is in [0, 10) and [5, 15); 12 in [5, 15) and [10, 20); windows close in end order
    assert driver.read("out") == [("k", _win(0, 10, 2)), ("k", _win(5, 15, 3)),
                                  ("k", _win(10, 20, 1))]


def test_event_time_from_the_value_and_several_aggregations() -> None:
    app = App()
    (app.source("orders")
     .tumbling_window(60_000, timestamp=lambda o: o["at"])
     .agg("per-minute", n=count(), spent=total(lambda o: o["amount"])).final().to("out"))
    driver = TestDriver(app)
    driver.pipe("orders", "ann", {"at": 60_500, "amount": 3}, timestamp=1)
    driver.pipe("orders", "ann", {"at": 119_999, "amount": 4}, timestamp=2)
    driver.pipe("orders", "bob", {"at": 120_000, "amount": 1}, timestamp=3)
    assert driver.read("out", timestamps=True) == [
        ("ann", _win(60_000, 120_000, {"n": 2, "spent": 7}), 119_999)]


def test_closed_windows_leave_no_state_behind() -> None:
    app = App()
    app.source("v").tumbling_window(100).count("c").final().to("out")
    driver = TestDriver(app)
    for i in range(20_000):  # 200 windows of 50 keys
        driver.pipe("v", f"user-{i % 50}", None, i)
    assert len(driver.state("c")) <= 51  # the open window's keys and the stream time
    assert len(driver.read("out")) == 199 * 50


def test_windows_are_declared_with_a_mode_and_sane_sizes() -> None:
    app = App()
    app.source("v").tumbling_window(10).count("c")  # no .final() / .current()
    with pytest.raises(DataflowError, match=r"window 'c': say when its results go out"):
        TestDriver(app)
    with pytest.raises(DataflowError, match="step .20 ms. must not exceed its size"):
        App().source("v").hopping_window(10, 20)
    with pytest.raises(DataflowError, match="size must be an int of milliseconds > 0"):
        App().source("v").tumbling_window(0)
    twice = App().source("v").tumbling_window(10).count("c")
    twice.final()
    with pytest.raises(DataflowError, match="once"):
        twice.current()


def test_a_record_without_a_usable_time_names_the_operator() -> None:
    app = App()
    app.source("v").tumbling_window(10, timestamp=lambda v: v["t"]).count("c").final().to("o")
    driver = TestDriver(app)
    with pytest.raises(OperatorError, match=r"operator c raised KeyError"):
        driver.pipe("v", "k", {})
    with pytest.raises(OperatorError, match=r"time must be an int of ms"):
        driver.pipe("v", "k", {"t": "soon"})


def test_describe_names_the_window() -> None:
    from millpond.streams import describe

    app = App()
    app.source("v").hopping_window(60_000, 10_000, grace_ms=5).count("c").current().to("o")
    assert "-> hopping window of 60000 ms, every 10000 ms, grace 5 ms, current: c (store c)" \
        in describe.text(app)


def test_sessions_close_after_the_gap_and_a_bridging_record_merges_two() -> None:
    app = App()
    app.source("v").session_window(10, grace_ms=20, late_to="late").sum("s").final().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", 1, 100), ("k", 2, 105), ("k", 4, 120), ("j", 8, 112)])
    # k: [100, 105] and [120, 120] (15 apart: two sessions); j: [112, 112]; none closed
    # (stream time 120 < 105 + 10 + grace 20)
    assert driver.read("out") == []
    driver.pipe("v", "k", 16, 113)  # 8 from 105, 7 from 120: bridges and merges them
    driver.pipe("v", "x", 0, 200)  # stream time 200: every session has closed
    assert driver.read("out", timestamps=True) == [
        ("j", {"start": 112, "end": 112, "value": 8}, 112),
        ("k", {"start": 100, "end": 120, "value": 23}, 120)]
    driver.pipe("v", "k", 32, 150)  # 150 + 10 + 20 <= 200: its session would have closed
    assert driver.read("late") == [("k", 32)] and driver.late_records == {"s": 1}
    # one entry a key: its open sessions [start, end, state]; closed ones leave nothing
    assert driver.state("s") == {"~stream-time": 200, 'k|"x"': [[200, 200, 0]]}


def test_session_current_results_and_records_exactly_a_gap_apart() -> None:
    app = App()
    app.source("v").session_window(10).count("c").current().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", None, 0), ("k", None, 9), ("k", None, 19)])  # 10 apart: new
    assert driver.read("out") == [
        ("k", {"start": 0, "end": 0, "value": 1}), ("k", {"start": 0, "end": 9, "value": 2}),
        ("k", {"start": 19, "end": 19, "value": 1})]


def test_sessions_close_without_a_store_scan_per_record() -> None:
    """Sessions close at almost every record; the operator pops its heap of close times
    instead of scanning the store (a scan forces the object cache's dirty entries down, and
    in RocksDB steps over the deletes of the sessions closed since a compaction). One scan
    builds the heap at the first close, again after a restart; what closes is the same, and
    a merged session's stale heap entry sends nothing."""
    app = App()
    app.source("v").session_window(10, grace_ms=20).count("c").final().to("out")
    driver = TestDriver(app)
    store = driver.store("c")
    scans: list[str] = []
    scan = store.range
    store.range = lambda start, end: (scans.append(start), scan(start, end))[1]
    driver.pipe_all("v", [(f"k{t % 3}", None, t * 7) for t in range(40)])
    closed = driver.read("out")
    assert len(closed) >= 20 and all(v["value"] == 1 for _, v in closed)
    assert len(scans) == 1  # the heap's build at the first close
    # k9 at 500 and 515 (two sessions, within grace), 508 bridges them: one session of three records
    driver.pipe_all("v", [("k9", None, 500), ("k9", None, 515), ("k9", None, 508)])
    driver.pipe("v", "end", None, 10_000)
    out = driver.read("out")
    assert ("k9", {"start": 500, "end": 515, "value": 3}) in out
    assert len([v for k, v in out if k == "k9"]) == 1 and len(scans) == 1
    assert set(driver.state("c")) == {"~stream-time", 'k|"end"'}  # one entry a key

    again = driver.restarted()
    back = again.store("c")
    seen: list[str] = []
    scan2 = back.range
    back.range = lambda start, end: (seen.append(start), scan2(start, end))[1]
    again.pipe_all("v", [("x", None, 20_000), ("y", None, 30_000)])
    assert len(seen) == 1 and again.read("out") == [
        ("end", {"start": 10_000, "end": 10_000, "value": 1}),
        ("x", {"start": 20_000, "end": 20_000, "value": 1})]


@pytest.mark.parametrize("heap", [1, 2, 5])  # (3 keys: at most ~6 open sessions)
def test_a_small_session_heap_closes_the_same_sessions(heap: int, monkeypatch) -> None:
    """The heap holds the close times of about SESSION_HEAP sessions (those that close
    first); stream time past its horizon, or a heap filled by new sessions, rebuilds it from
    one scan. Any bound closes the same sessions at the same records, before and after a
    restart, as an unbounded heap does."""
    from millpond.streams import window_ops
    records = _disordered(400, seed=11) + [(k, 0, 10_000) for k in "abcdefgh"]

    def run(cut: int) -> tuple[list, list, int]:
        app = App()
        app.source("v").session_window(4, grace_ms=3, late_to="late").sum("w").final().to(
            "out")
        first = TestDriver(app)
        scans = [0]
        scan = first.store("w").range
        first.store("w").range = lambda a, b: (scans.__setitem__(0, scans[0] + 1),
                                               scan(a, b))[1]
        first.pipe_all("v", records[:cut])
        second = first.restarted()
        second.pipe_all("v", records[cut:])
        return (first.read("out") + second.read("out"), first.read("late")
                + second.read("late"), scans[0])

    want_out, want_late, one_scan = run(len(records))
    assert one_scan == 1 and len(want_out) > 50 and want_late
    monkeypatch.setattr(window_ops, "SESSION_HEAP", heap)
    out, late, scans = run(len(records))
    assert (out, late) == (want_out, want_late) and scans > (10 if heap < 3 else 0)
    for cut in (1, 97, 250, 401):
        assert run(cut)[:2] == (want_out, want_late), cut


def test_a_pass_that_closes_every_session_holds_a_chunk_of_keys(monkeypatch) -> None:
    """A record far ahead closes every open session in one pass; the keys it changes are
    written back every CLOSE_CHUNK keys, not held until the pass ends (they were: ~150 B a
    key outside the memory plan), and any chunk closes the same sessions with the same
    results (a key whose records merged into one session included)."""
    import tracemalloc

    from millpond.streams import window_ops
    rng = random.Random(5)
    records = sorted(((f"k{i:05d}", 1, rng.randrange(0, 50)) for i in range(6_000)),
                     key=lambda r: r[2])
    records += [("k00002", 1, 49), ("k00002", 1, 49)]

    def run() -> tuple[list, dict, int]:
        app = App()
        app.source("v").session_window(100).sum("w").final().to("out")
        driver = TestDriver(app)
        driver.pipe_all("v", records)
        assert driver.read("out") == []
        tracemalloc.start()
        driver.pipe_all("v", [("z", 1, 10_000)])  # closes all 6,000
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        with driver.store("w").range("k|", "k}") as it:  # every key's open sessions
            left = dict(it)
        return driver.read("out"), left, peak

    monkeypatch.setattr(window_ops, "CLOSE_CHUNK", 10**9)  # the old pass: every key held
    want, left, held_all = run()
    assert len(want) == 6_000 and list(left) == ['k|"z"']
    assert sorted(v["value"] for k, v in want if k == "k00002") == [3]
    for chunk in (1, 2, 7, 1_024):
        monkeypatch.setattr(window_ops, "CLOSE_CHUNK", chunk)
        out, rest, peak = run()
        assert (out, rest) == (want, left), chunk
    assert peak < held_all - 500_000, (peak, held_all)  # 6,000 keys held: ~1 MB more


def test_a_session_aggregation_must_merge() -> None:
    from millpond.streams import fold

    stream = App().source("v").session_window(10)
    with pytest.raises(DataflowError, match="needs a merge"):
        stream.aggregate("f", fold(list, lambda acc, v: [*acc, v]))
    stream.aggregate("g", fold(list, lambda acc, v: [*acc, v], merge=lambda a, b: a + b))


def test_sessions_in_any_order_within_grace_equal_the_sorted_sessionization() -> None:
    import random

    rng = random.Random(7)
    records = [(f"k{rng.randrange(5)}", rng.randrange(10_000)) for _ in range(2_000)]
    app = App()
    app.source("v").session_window(40, grace_ms=1_000_000).count("c").final().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [(key, None, t) for key, t in records])  # shuffled event times
    driver.pipe("v", "end", None, 5_000_000)  # closes everything
    expected = []
    for key in sorted({k for k, _ in records}):
        times = sorted(t for k, t in records if k == key)
        start = prev = times[0]
        n = 0
        for t in times:
            if t - prev >= 40:
                expected.append((key, {"start": start, "end": prev, "value": n}))
                start, n = t, 0
            prev, n = t, n + 1
        expected.append((key, {"start": start, "end": prev, "value": n}))
    got = [(k, v) for k, v in driver.read("out") if k != "end"]
    assert sorted(got, key=repr) == sorted(expected, key=repr)


def test_tumbling_count_windows_close_at_their_size_and_leave_nothing() -> None:
    app = App()
    app.source("v").tumbling_count_window(3).sum("s").final().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", i, 100 + i) for i in range(7)] + [("j", 5, 1)])
    assert driver.read("out", timestamps=True) == [
        ("k", {"start": 100, "end": 102, "value": 3}, 102),
        ("k", {"start": 103, "end": 105, "value": 12}, 105)]
    # (between windows a key was deleted: it counts again from 0)
    assert driver.state("s") == {'"k"': {"i": 1, "w": [[0, 106, 6]]},
                                 '"j"': {"i": 1, "w": [[0, 1, 5]]}}
    driver.pipe_all("v", [("k", 1, 107), ("k", 1, 108)])
    assert driver.read("out") == [("k", {"start": 106, "end": 108, "value": 8})]
    assert '"k"' not in driver.state("s")  # a key between windows is deleted


def test_hopping_count_windows_overlap_and_current_emits_each_update() -> None:
    app = App()
    app.source("v").hopping_count_window(4, 2).count("c").final().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", None, t) for t in range(8)])
    # windows of records 0-3, 2-5, 4-7 (6-9 is open)
    assert driver.read("out") == [("k", {"start": 0, "end": 3, "value": 4}),
                                  ("k", {"start": 2, "end": 5, "value": 4}),
                                  ("k", {"start": 4, "end": 7, "value": 4})]
    current = App()
    current.source("v").tumbling_count_window(2).count("c").current().to("out")
    driver = TestDriver(current)
    driver.pipe_all("v", [("k", None, t) for t in range(3)])
    assert [v["value"] for _, v in driver.read("out")] == [1, 2, 1]
    with pytest.raises(DataflowError, match="step .3. must not exceed its size .2."):
        App().source("v").hopping_count_window(2, 3)


def test_a_window_fed_by_two_merged_streams_has_one_stream_time() -> None:
    app = App()
    a, b = app.source("a"), app.source("b")
    a.merge(b).tumbling_window(10).count("c").final().to("out")
    driver = TestDriver(app)
    driver.pipe("a", "k", None, 25)  # stream time 25 (from a): [0, 10) and [10, 20) closed
    driver.pipe("b", "k", None, 5)  # from b: late, whichever stream it came by
    assert driver.late_records == {"c": 1}
    assert driver.state("c")["~stream-time"] == 25


def test_idle_close_moves_a_quiet_stream_time_on_with_the_wall_clock() -> None:
    app = App()
    app.source("v").tumbling_window(1_000, idle_close_ms=5_000).count("c").final().to("out")
    driver = TestDriver(app, start_time=1_000_000)
    driver.pipe_all("v", [("k", None, 100), ("k", None, 900)])
    driver.advance_time(4_999)
    assert driver.read("out") == []  # quiet for less than 5 s
    driver.advance_time(1)  # 5 s quiet: stream time 900 + 5 000 closes [0, 1 000)
    assert driver.read("out") == [("k", {"start": 0, "end": 1_000, "value": 2})]
    assert driver.state("c")["~stream-time"] == 5_900
    quiet = App()
    quiet.source("v").tumbling_window(1_000).count("c").final().to("out")
    driver = TestDriver(quiet)
    driver.pipe("v", "k", None, 100)
    driver.advance_time(3_600_000)
    assert driver.read("out") == []  # without idle_close_ms closing follows event time only


def test_idle_close_closes_sessions_before_and_after_a_restart() -> None:
    """A session's close time is in the operator's heap, built from the store after a
    restart (the first close builds it, here the idle watch's)."""
    def app() -> App:
        a = App()
        a.source("v").session_window(1_000, idle_close_ms=5_000).count("c").final().to("out")
        return a

    driver = TestDriver(app(), start_time=1_000_000)
    driver.pipe_all("v", [("k", None, 100), ("k", None, 900), ("j", None, 1_500)])
    driver.advance_time(5_000)  # stream time 6 500: both sessions closed
    assert driver.read("out") == [("k", {"start": 100, "end": 900, "value": 2}),
                                  ("j", {"start": 1_500, "end": 1_500, "value": 1})]
    driver.pipe("v", "m", None, 7_000)
    again = driver.restarted()
    again.advance_time(5_000)
    assert again.read("out") == [("m", {"start": 7_000, "end": 7_000, "value": 1})]
    assert set(again.state("c")) == {"~stream-time"}


def test_early_results_every_n_records_and_every_t_ms_before_the_final_one() -> None:
    app = App()
    (app.source("v").tumbling_window(100).count("c")
     .final(early_every_records=2).to("out"))
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", None, t) for t in (1, 2, 3, 4, 5)] + [("k", None, 100)])
    assert driver.read("out") == [
        ("k", {"start": 0, "end": 100, "value": 2, "early": True}),
        ("k", {"start": 0, "end": 100, "value": 4, "early": True}),
        ("k", {"start": 0, "end": 100, "value": 5})]
    timed = App()
    timed.source("v").tumbling_window(100).sum("s").final(early_every_ms=1_000).to("out")
    driver = TestDriver(timed, start_time=50_000)
    driver.pipe_all("v", [("a", 1, 10), ("b", 2, 20), ("a", 3, 30)])
    driver.advance_time(999)
    assert driver.read("out") == []
    driver.advance_time(1)
    assert driver.read("out", timestamps=True) == [
        ("a", {"start": 0, "end": 100, "value": 4, "early": True}, 51_000),
        ("b", {"start": 0, "end": 100, "value": 2, "early": True}, 51_000)]
    driver.advance_time(1_000)
    assert driver.read("out") == []  # nothing updated since
    with pytest.raises(DataflowError, match="early results are for tumbling and hopping"):
        App().source("v").session_window(10).count("x").final(early_every_records=3)


def test_hopping_windows_near_time_zero_start_at_zero() -> None:
    app = App()
    app.source("v").hopping_window(10, 5).count("c").final().to("out")
    driver = TestDriver(app)
    driver.pipe_all("v", [("k", None, 3), ("k", None, 100)])
    assert driver.read("out") == [("k", {"start": 0, "end": 10, "value": 1})]  # not [-5, 5)


def _disordered(n: int, seed: int) -> list[tuple[str, int, int]]:
    """``n`` records of 3 keys whose times mostly grow, some up to 12 ms back (some within
    grace, some late)."""
    rng = random.Random(seed)
    t, out = 0, []
    for i in range(n):
        t += rng.choice([0, 1, 1, 2, 3, 7])
        out.append((rng.choice("abc"), i, max(0, t - rng.choice([0, 0, 0, 0, 2, 5, 12]))))
    return out


@pytest.mark.parametrize("make", [
    lambda s: s.tumbling_window(10, grace_ms=3, late_to="late"),
    lambda s: s.hopping_window(10, 4, grace_ms=2, late_to="late"),
    lambda s: s.tumbling_window(7, late_to="late"),
    lambda s: s.session_window(5, grace_ms=3, late_to="late"),
], ids=["tumbling-grace", "hopping", "tumbling", "session"])
def test_a_restart_from_the_stores_alone_sends_what_one_uninterrupted_run_sends(make) -> None:
    """The operator keeps stream time in memory and writes its store's copy only when it
    matters (tumbling and hopping: when it passes a window end, less grace): an app restarted
    from its stores alone, at any record, must close the same windows and find the same
    records late as a run without the restart."""
    records = _disordered(300, seed=5)

    def app() -> App:
        a = App()
        make(a.source("v")).sum("w").final().to("out")
        return a

    whole = TestDriver(app())
    whole.pipe_all("v", records)
    want_out, want_late = whole.read("out"), whole.read("late")
    assert want_out and want_late  # the data closes windows and has late records
    for cut in range(1, len(records)):
        first = TestDriver(app())
        first.pipe_all("v", records[:cut])
        out, late = first.read("out"), first.read("late")
        second = first.restarted()
        second.pipe_all("v", records[cut:])
        assert out + second.read("out") == want_out, cut
        assert late + second.read("late") == want_late, cut


def test_tumbling_and_hopping_windows_close_without_a_store_scan() -> None:
    """The operator indexes the windows it opens: a close gets them (a hit in the job's
    object cache) instead of scanning the store, and a window it never opened is put
    without a lookup. After a restart, closes scan until every window opened before it
    has closed, then the index takes over again."""
    app = App()
    app.source("v").hopping_window(10, 5).count("c").final().to("out")
    driver = TestDriver(app)
    store = driver.store("c")
    scans: list[str] = []
    scan, get = store.range, store.get
    gets: list[str] = []
    store.range = lambda start, end: (scans.append(start), scan(start, end))[1]
    get_all = store.get_all
    store.get = lambda key: (gets.append(key), get(key))[1]
    store.get_all = lambda keys: (gets.extend(keys), get_all(keys))[1]
    driver.pipe_all("v", [(f"k{t % 4}", None, t) for t in range(100)])
    out = driver.read("out")
    assert len(out) == 4 * 18 and scans == []  # ends 10..95 closed, 4 keys each
    # 195 window updates (times 0-4 fall in one window, the rest in two) of 80 windows
    # (4 keys, starts 0..95): a get for each update but a window's first, one per close
    assert len([g for g in gets if g != "~stream-time"]) == (195 - 80) + 72

    again = driver.restarted()
    back = again.store("c")
    seen: list[str] = []
    scan2 = back.range
    back.range = lambda start, end: (seen.append(start), scan2(start, end))[1]
    again.pipe_all("v", [(f"k{t % 4}", None, t) for t in range(100, 200)])
    assert 1 <= len(seen) <= 4  # closes until the windows opened before it closed
    whole = TestDriver(app)
    whole.pipe_all("v", [(f"k{t % 4}", None, t) for t in range(200)])
    assert out + again.read("out") == whole.read("out")


@pytest.mark.parametrize("bound", [1, 2, 5])
def test_a_small_window_index_closes_the_same_windows(bound: int, monkeypatch) -> None:
    """The index holds up to WINDOW_INDEX open windows; past that, the windows it held are
    closed by scans again. Any bound, with restarts at several records, closes the same
    windows with the same results and finds the same records late."""
    from millpond.streams import window_ops
    records = _disordered(300, seed=8) + [(k, 0, 10_000) for k in "abc"]

    def run(cut: int) -> tuple[list, list]:
        app = App()
        app.source("v").hopping_window(10, 4, grace_ms=3, late_to="late").sum("w").final().to(
            "out")
        first = TestDriver(app)
        first.pipe_all("v", records[:cut])
        second = first.restarted()
        second.pipe_all("v", records[cut:])
        return first.read("out") + second.read("out"), first.read("late") + second.read("late")

    want = run(len(records))
    assert len(want[0]) > 100 and want[1]
    monkeypatch.setattr(window_ops, "WINDOW_INDEX", bound)
    for cut in (1, 77, 150, 299, len(records)):
        assert run(cut) == want, cut


def test_the_stores_stream_time_is_written_when_it_passes_a_window_end() -> None:
    """Not at every record: only which ends stream time has passed matters."""
    app = App()
    app.source("v").tumbling_window(10, grace_ms=2).count("c").final().to("out")
    driver = TestDriver(app)
    written = []
    for t in (1, 5, 11, 12, 13, 19, 25, 31, 32):
        driver.pipe("v", "k", None, t)
        written.append(driver.state("c")["~stream-time"])
    # window ends plus grace: 12, 22, 32: the first record's 1, then 12, 25 and 32
    assert written == [1, 1, 1, 12, 12, 12, 25, 25, 32]


class _StackDriver(TestDriver):
    """The test driver with the window operator's store a real stack (RocksDB under an
    object cache of ``max_bytes``), as a job's."""

    __test__ = False

    def __init__(self, app: App, path, name: str, max_bytes: int) -> None:
        from millpond.serdes import JsonSerde, StringSerde
        from millpond.stores import RocksDbEngine, RocksDbOptions, build_stack

        engine = RocksDbEngine(path, RocksDbOptions(block_cache_size_bytes=8 << 20))
        self.stack = build_stack(name, engine, StringSerde(), JsonSerde(), 1_000_000, 1_000,
                                 cache_max_bytes=max_bytes)
        self.scans = 0
        self._name = name
        super().__init__(app)

    def store(self, name: str):
        if name != self._name:
            return super().store(name)
        driver, store = self, self.stack.store

        class Counting:  # counts the operator's range scans (its heap's rebuilds)
            inner = store

            def __getattr__(self, attr: str):
                return getattr(store, attr)

            def range(self, start, end):
                driver.scans += 1
                return store.range(start, end)

        return Counting()


@pytest.mark.parametrize("kind", ["session", "hopping"])
def test_an_operators_index_takes_its_share_of_the_stores_object_cache_bound(
        kind: str, tmp_path) -> None:
    """A session operator's heap and a time window operator's index are held within
    INDEX_SHARE of their store's object-cache bound (at least MIN_INDEX entries), reserved
    from that cache: cache and index together keep within the bound. With a small bound the
    heap is rebuilt (one scan each) more often than the driver's unbounded one, and the
    results are the same."""
    from millpond.streams import window_ops

    keys = 20_000
    records = [(f"user-{i % keys:05d}", 1, i // 4) for i in range(3 * keys)]
    records.append(("flush", 1, 10_000_000))

    def app() -> App:
        a = App()
        s = a.source("v")
        w = s.session_window(2_000) if kind == "session" else s.hopping_window(6_000, 2_000)
        w.sum("w").final().to("out")
        return a

    plain = TestDriver(app())
    plain.pipe_all("v", records)
    want = plain.read("out")
    assert len(want) > keys

    for max_bytes, small in ((512 * 1024, True), (256 * 1024 * 1024, False)):
        driver = _StackDriver(app(), tmp_path / f"{kind}-{max_bytes}", "w", max_bytes)
        cache = driver.stack.cache
        assert cache is not None
        seen = []  # (reserved, bytes charged) now and then
        for i, (key, value, t) in enumerate(records):
            driver.pipe("v", key, value, t)
            if i % 500 == 0:
                seen.append((cache.reserved, cache.estimated_bytes))
        assert driver.read("out") == want, max_bytes
        most = max(r for r, _ in seen)
        if small:
            # the index took its share and no more; the cache kept to what was left
            assert 0 < most <= max_bytes * window_ops.INDEX_SHARE * 1.05 + 64 * 1024
            assert all(r + b <= max_bytes + 8 * 1024 for r, b in seen), seen[-5:]
            if kind == "session":
                assert driver.scans > 10
        else:
            assert most > 0
            if kind == "session":  # the heap holds every session: one build or so
                assert driver.scans <= 3
        driver.stack.store.close()

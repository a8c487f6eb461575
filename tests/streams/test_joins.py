"""Stream-table lookup joins in the test driver: the table is a topic's latest value per key
(a null deletes), a record joins the value its task holds when it comes; the same for a
table and a global table (tests/streams/test_global_table.py has the rest of those)."""

from __future__ import annotations

import pytest

from millpond.streams import App, DataflowError, TestDriver

TABLES = ("table", "global_table")


def _app(how: str, kind: str = "table") -> App:
    app = App()
    zips = getattr(app, kind)("profiles", "user-zips")
    (app.source("views")
     .join(zips, lambda view, profile: {**view, "zip": profile and profile["zip"]}, how=how)
     .to("out"))
    return app


@pytest.mark.parametrize("kind", TABLES)
def test_an_inner_join_drops_records_the_table_lacks_and_follows_its_updates(kind: str) -> None:
    driver = TestDriver(_app("inner", kind))
    driver.pipe("views", "ann", {"page": "/a"}, 10)  # no profile yet: dropped
    driver.pipe("profiles", "ann", {"zip": "10115"})
    driver.pipe("views", "ann", {"page": "/b"}, 20)
    driver.pipe("profiles", "ann", {"zip": "80331"})  # moved
    driver.pipe("views", "ann", {"page": "/c"}, 30)
    driver.pipe("profiles", "ann", None)  # deleted
    driver.pipe("views", "ann", {"page": "/d"}, 40)
    assert driver.read("out", timestamps=True) == [
        ("ann", {"page": "/b", "zip": "10115"}, 20), ("ann", {"page": "/c", "zip": "80331"}, 30)]
    assert driver.state("user-zips") == {}


@pytest.mark.parametrize("kind", TABLES)
def test_a_left_join_passes_none_for_a_missing_key(kind: str) -> None:
    driver = TestDriver(_app("left", kind))
    driver.pipe("profiles", "bob", {"zip": "20095"})
    driver.pipe_all("views", [("ann", {"page": "/a"}), ("bob", {"page": "/b"})])
    assert driver.read("out") == [("ann", {"page": "/a", "zip": None}),
                                  ("bob", {"page": "/b", "zip": "20095"})]
    assert driver.state("user-zips") == {"bob": {"zip": "20095"}}


def test_a_join_needs_a_table_and_a_known_kind() -> None:
    app = App()
    table = app.table("t", "tab")
    with pytest.raises(DataflowError, match="it is 'inner' or 'left'"):
        app.source("s").join(table, lambda v, t: v, how="outer")
    with pytest.raises(DataflowError, match="must be a table"):
        app.source("s").join("t", lambda v, t: v)  # type: ignore[arg-type]
    with pytest.raises(DataflowError, match="two operators are named 'tab'"):
        app.table("u", "tab")


def _ad_join(how: str, within: int = 10, grace: int = 0) -> App:
    app = App()
    impressions, clicks = app.source("impressions"), app.source("clicks")
    (impressions.window_join("ad-join", clicks, within,
                             lambda imp, click: [imp, click], how=how, grace_ms=grace,
                             late_to="late")
     .to("out"))
    return app


def test_a_window_join_pairs_records_within_the_window_once() -> None:
    driver = TestDriver(_ad_join("inner"))
    driver.pipe("impressions", "ad1", "i1", 100)
    driver.pipe("clicks", "ad1", "c1", 105)  # 5 after: joins
    driver.pipe("clicks", "ad1", "c2", 110)  # 10 after: joins (within is inclusive)
    driver.pipe("clicks", "ad1", "c3", 111)  # 11 after: no
    driver.pipe("impressions", "ad1", "i2", 101)  # out of order: joins c1, c2, c3 (all within 10)
    driver.pipe("clicks", "ad2", "c4", 104)  # another key: nothing
    assert driver.read("out", timestamps=True) == [
        ("ad1", ["i1", "c1"], 105), ("ad1", ["i1", "c2"], 110),
        ("ad1", ["i2", "c1"], 105), ("ad1", ["i2", "c2"], 110), ("ad1", ["i2", "c3"], 111)]


def test_left_and_outer_joins_send_the_unmatched_when_they_expire() -> None:
    for how, unmatched in [("inner", []), ("left", [("a", ["i-alone", None], 100)]),
                           ("outer", [("a", ["i-alone", None], 100),
                                      ("b", [None, "c-alone"], 103)])]:
        driver = TestDriver(_ad_join(how, within=10, grace=5))
        driver.pipe("impressions", "a", "i-alone", 100)
        driver.pipe("clicks", "b", "c-alone", 103)
        driver.pipe("impressions", "m", "i", 104)
        driver.pipe("clicks", "m", "c", 106)  # matched: never sent as unmatched
        assert driver.read("out") == [("m", ["i", "c"])]
        # an impression expires when the *clicks'* stream time passes its time + 10 + 5
        driver.pipe("clicks", "z", "later", 115)
        assert driver.read("out") == []
        driver.pipe("clicks", "z", "later", 125)
        assert driver.read("out", timestamps=True) == unmatched[:1], how
        # and a click when the impressions' does
        driver.pipe("impressions", "y", "i-later", 119)
        assert driver.read("out", timestamps=True) == unmatched[1:], how
        driver.pipe("impressions", "a", "too-late", 113)  # 113 + grace 5 < 119: late
        assert driver.read("late") == [("a", "too-late")]
        assert driver.late_records == {"ad-join": 1}
        waiting = {(k.split("|")[0], k.split("|")[1], int(k.split("|")[2]))
                   for k in driver.state("ad-join") if k[0] not in "x~"}
        # the clicks wait for the impressions' stream time (119) to pass their time + 15
        assert waiting == {('"m"', "R", 106), ('"z"', "R", 115), ('"z"', "R", 125),
                           ('"y"', "L", 119)}


def test_a_window_join_in_any_order_within_grace_equals_the_brute_force_pairs() -> None:
    import random

    rng = random.Random(3)
    left = [(f"k{rng.randrange(4)}", f"l{i}", rng.randrange(2_000)) for i in range(300)]
    right = [(f"k{rng.randrange(4)}", f"r{i}", rng.randrange(2_000)) for i in range(300)]
    feed = [("impressions", r) for r in left] + [("clicks", r) for r in right]
    rng.shuffle(feed)
    driver = TestDriver(_ad_join("outer", within=25, grace=10_000))
    for topic, (key, value, t) in feed:
        driver.pipe(topic, key, value, t)
    driver.pipe("clicks", "end", "end", 1_000_000)  # both sides' stream times: expire all
    driver.pipe("impressions", "end", "end", 1_000_000)
    pairs = [(k, lv, rv) for k, lv, lt in left for k2, rv, rt in right
             if k == k2 and abs(lt - rt) <= 25]
    matched = {lv for _, lv, _ in pairs} | {rv for _, _, rv in pairs}
    expected = sorted([(k, [lv, rv]) for k, lv, rv in pairs]
                      + [(k, [v, None]) for k, v, _ in left if v not in matched]
                      + [(k, [None, v]) for k, v, _ in right if v not in matched], key=repr)
    assert sorted(driver.read("out"), key=repr) == sorted(
        [*expected, ("end", ["end", "end"])], key=repr)


def test_a_window_join_does_not_depend_on_how_in_order_inputs_interleave() -> None:
    import random

    rng = random.Random(5)
    left = sorted(((f"k{rng.randrange(3)}", f"l{i}", rng.randrange(5_000)) for i in range(200)),
                  key=lambda r: r[2])
    right = sorted(((f"k{rng.randrange(3)}", f"r{i}", rng.randrange(5_000)) for i in range(200)),
                   key=lambda r: r[2])
    pairs = [(k, lv, rv) for k, lv, lt in left for k2, rv, rt in right
             if k == k2 and abs(lt - rt) <= 30]
    matched = {lv for _, lv, _ in pairs} | {rv for _, _, rv in pairs}
    expected = sorted([(k, [lv, rv]) for k, lv, rv in pairs]
                      + [(k, [v, None]) for k, v, _ in left if v not in matched]
                      + [(k, [None, v]) for k, v, _ in right if v not in matched], key=repr)
    lefts = [("impressions", r) for r in left]
    rights = [("clicks", r) for r in right]
    mixed = [*lefts, *rights]
    rng.shuffle(mixed)  # each input stays in order: merge the shuffled positions back in order
    it_l, it_r = iter(lefts), iter(rights)
    interleaved = [next(it_l) if topic == "impressions" else next(it_r) for topic, _ in mixed]
    for feed in (lefts + rights, rights + lefts, interleaved):
        driver = TestDriver(_ad_join("outer", within=30, grace=0))
        for topic, (key, value, t) in feed:
            driver.pipe(topic, key, value, t)
        driver.pipe("clicks", "end", None, 100_000)
        driver.pipe("impressions", "end", None, 100_000)
        got = [r for r in driver.read("out") if r[0] != "end"]
        assert sorted(got, key=repr) == expected

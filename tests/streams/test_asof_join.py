"""As-of joins in the test driver: a versioned table keeps each key's values by time, and a
record joins its key's latest version at or before its time. Edge cases: a record exactly at
a version's time, equal timestamps, a deletion, history past the retention, late versions,
and a brute-force reference."""

from __future__ import annotations

import random

import pytest

from millpond.streams import App, DataflowError, TestDriver


def _app(how: str = "inner", retention: int = 1_000_000) -> App:
    app = App()
    rates = app.versioned_table("rates", "rate-versions", retention)
    app.source("trades").join_asof(rates, lambda trade, rate: [trade, rate], how=how).to("out")
    return app


def test_a_record_joins_the_latest_version_at_or_before_its_time() -> None:
    driver = TestDriver(_app())
    driver.pipe_all("rates", [("eur", 1.1, 100), ("eur", 1.2, 200), ("eur", 1.25, 200),
                              ("usd", 1.0, 150)])
    driver.pipe_all("trades", [("eur", "t0", 99),  # before the first version: none
                               ("eur", "t1", 100),  # exactly at a version's time: it
                               ("eur", "t2", 199),
                               ("eur", "t3", 200),  # two versions at 200: the later written
                               ("eur", "t4", 10_000), ("gbp", "t5", 300)])
    assert driver.read("out", timestamps=True) == [
        ("eur", ["t1", 1.1], 100), ("eur", ["t2", 1.1], 199), ("eur", ["t3", 1.25], 200),
        ("eur", ["t4", 1.25], 10_000)]


def test_a_deletion_is_a_version_and_left_joins_pass_none() -> None:
    driver = TestDriver(_app("left"))
    driver.pipe_all("rates", [("eur", 1.1, 100), ("eur", None, 200), ("eur", 1.3, 300)])
    driver.pipe_all("trades", [("eur", "a", 50), ("eur", "b", 150), ("eur", "c", 250),
                               ("eur", "d", 300)])
    assert driver.read("out") == [("eur", ["a", None]), ("eur", ["b", 1.1]),
                                  ("eur", ["c", None]), ("eur", ["d", 1.3])]


def test_history_past_the_retention_is_dropped_and_old_versions_are_late() -> None:
    driver = TestDriver(_app("left", retention=15))
    driver.pipe_all("rates", [("k", "v0", 0), ("k", "v10", 10), ("k", "v20", 20),
                              ("j", "gone", 6), ("j", None, 12), ("k", "v30", 30)])
    # table stream time 30, history back to 15: of the versions at or before 15, k keeps
    # v10 (a lookup at 15 needs it), j keeps nothing (its last one there is a deletion)
    # (and the versions after 15 stay listed to settle, x|<time>|<seq>)
    assert sorted(driver.state("rate-versions")) == [
        '"k"|0000000000000010', '"k"|0000000000000020', '"k"|0000000000000030',
        "x|0000000000000020|0000000000000003", "x|0000000000000030|0000000000000006",
        "~seq", "~stream-time"]
    driver.pipe_all("trades", [("k", "at-15", 15), ("k", "at-14", 14), ("j", "at-20", 20)])
    assert driver.read("out") == [("k", ["at-15", "v10"]),
                                  ("k", ["at-14", None]),  # before the history kept
                                  ("j", ["at-20", None])]
    driver.pipe("rates", "k", "v14", 14)  # older than 30 - 15: late
    driver.pipe("rates", "k", "v15", 15)  # exactly at the history's start: kept
    assert driver.late_records == {"rate-versions": 1}
    driver.pipe("trades", "k", "at-16", 16)
    assert driver.read("out") == [("k", ["at-16", "v15"])]


def test_a_versioned_table_by_a_time_in_its_values() -> None:
    app = App()
    prices = app.versioned_table("prices", "p", 60_000, timestamp=lambda p: p["at"])
    (app.source("orders")
     .join_asof(prices, lambda order, price: order["n"] * price["eur"],
                timestamp=lambda order: order["at"])
     .to("totals"))
    driver = TestDriver(app)
    driver.pipe("prices", "apple", {"at": 1_000, "eur": 2}, timestamp=5)
    driver.pipe("prices", "apple", {"at": 2_000, "eur": 3}, timestamp=6)
    driver.pipe("orders", "apple", {"at": 1_999, "n": 4}, timestamp=7)
    assert driver.read("totals") == [("apple", 8)]


def test_as_of_joins_equal_the_brute_force_lookup() -> None:
    rng = random.Random(2)
    versions = [(f"k{rng.randrange(5)}", rng.choice([None, *range(10)]), rng.randrange(1_000))
                for _ in range(300)]
    trades = [(f"k{rng.randrange(6)}", f"t{i}", rng.randrange(1_200)) for i in range(300)]
    for how in ("inner", "left"):
        driver = TestDriver(_app(how))
        shuffled = versions[:]
        rng.shuffle(shuffled)  # in any order: each version is kept at its time
        last: dict[tuple[str, int], object] = {}
        for key, value, t in shuffled:
            driver.pipe("rates", key, value, t)
            last[(key, t)] = value  # (two versions at one time: the later written)
        driver.pipe_all("trades", trades)
        expected = []
        for key, name, t in trades:
            times = [vt for (k, vt) in last if k == key and vt <= t]
            found = last[(key, max(times))] if times else None
            if found is not None or how == "left":
                expected.append((key, [name, found]))
        assert driver.read("out") == expected


def test_bad_arguments_say_what_was_wrong() -> None:
    app = App()
    table = app.table("t", "plain")
    with pytest.raises(DataflowError, match="join_asof: the first argument must be a "
                                            "versioned table"):
        app.source("s").join_asof(table, lambda v, t: v)
    versions = app.versioned_table("u", "vers", 10)
    with pytest.raises(DataflowError, match="join_asof: how='outer'; it is 'inner' or 'left'"):
        app.source("s").join_asof(versions, lambda v, t: v, how="outer")
    with pytest.raises(DataflowError, match="fn .of value, table value. and timestamp"):
        app.source("s").join_asof(versions, None)  # type: ignore[arg-type]
    with pytest.raises(DataflowError, match="versioned_table 'w': retention_ms must be an int "
                                            "of milliseconds > 0, got 0"):
        app.versioned_table("w", "w", 0)
    with pytest.raises(DataflowError, match="join: the first argument must be a table"):
        app.source("s").join(versions, lambda v, t: v)


def test_describe_names_the_table_and_its_retention() -> None:
    from millpond.streams.describe import text

    described = text(_app(retention=60_000))
    assert "-> versioned table, retention 60000 ms: rate-versions (store rate-versions)" \
        in described
    assert "-> join_asof #1 (from trades): as of its time in versioned table rate-versions" \
        in described

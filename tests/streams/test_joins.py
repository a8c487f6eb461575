"""Stream-table lookup joins in the test driver: the table is a topic's latest value per key
(a null deletes), a record joins the value its task holds when it comes."""

from __future__ import annotations

import pytest

from millpond.streams import App, DataflowError, TestDriver


def _app(how: str) -> App:
    app = App()
    zips = app.table("profiles", "user-zips")
    (app.source("views")
     .join(zips, lambda view, profile: {**view, "zip": profile and profile["zip"]}, how=how)
     .to("out"))
    return app


def test_an_inner_join_drops_records_the_table_lacks_and_follows_its_updates() -> None:
    driver = TestDriver(_app("inner"))
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


def test_a_left_join_passes_none_for_a_missing_key() -> None:
    driver = TestDriver(_app("left"))
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

"""The Streams API guide's example (examples/page_stats_app.py): the guide shows the file as it
is, and the test driver's state equals a plain-Python reference on generated page views."""

from __future__ import annotations

import re
from collections import Counter

from examples.generate import page_views
from millpond.streams import TestDriver
from tests.kafka_util import REPO


def test_the_guide_shows_the_shipped_app() -> None:
    guide = (REPO / "docs" / "streams-guide.md").read_text()
    source = (REPO / "examples" / "page_stats_app.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    code = source[source.index("from millpond.streams import"):]
    assert code in blocks, "docs/streams-guide.md must show examples/page_stats_app.py's code"


def test_the_app_matches_a_plain_python_reference() -> None:
    from examples.page_stats_app import app

    records = page_views(seed=7, events=3_000, users=40, hours=2)
    driver = TestDriver(app)
    driver.pipe_all("page-views", [(r.key, r.value) for r in records])
    views = [r.value for r in records]
    items = Counter(v["page"].removeprefix("/item/") for v in views
                    if v["page"].startswith("/item/"))
    checkouts: dict[str, dict[str, int]] = {}
    for v in views:
        if v["page"] == "/checkout":
            seen = checkouts.get(v["user_id"], {"n": 0, "last_ms": v["timestamp"]})
            checkouts[v["user_id"]] = {"n": seen["n"] + 1,
                                       "last_ms": max(seen["last_ms"], v["timestamp"])}
    other = Counter(v["user_id"] for v in views
                    if not v["page"].startswith("/item/")
                    and v["page"] not in ("/checkout", "/help"))
    assert driver.state("item-views") == dict(items)
    assert driver.state("checkouts") == checkouts
    assert driver.state("other-views") == dict(other)
    assert len(driver.read("item-view-counts")) == sum(items.values())

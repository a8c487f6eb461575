"""Example 1 as a streams app: page views per user per hour, by event time (the StreamTask
version is hourly_page_views.py; a test checks both send the same hourly counts).

A tumbling window of ``window.size.ms`` over each user's views, its time the view's
``timestamp`` field, open ``window.grace.ms`` past its end for out-of-order views; each hour's
count goes out once when it closes, keyed ``<hour>|<user_id>`` like the StreamTask's.
"""

from __future__ import annotations

from typing import Any

from examples.hourly_page_views import hour_key
from millpond.streams import App


def hourly_page_views(config: Any) -> App:
    size = int(config.get("window.size.ms") or 3_600_000)
    grace = int(config.get("window.grace.ms") or 300_000)
    app = App()
    (app.source((config.get("views.stream") or "page-views").removeprefix("kafka."))
     .tumbling_window(size, grace_ms=grace, timestamp=lambda view: int(view["timestamp"]))
     .count("hourly-counts").final()
     .map(lambda user, window: {"hour": hour_key(window["start"] // size, size),
                                "user_id": user, "views": window["value"]}, with_key=True)
     .to((config.get("output.stream") or "hourly-page-views").removeprefix("kafka."),
         key=lambda row: f"{row['hour']}|{row['user_id']}"))
    return app

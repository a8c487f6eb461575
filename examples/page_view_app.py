"""The README's page-view counter as a streams app: each user's count of page views, sent to
the counts topic on every update (the StreamTask version, page_view_counter.py, sends the
changed counts every window). Page views are keyed by user, so the count per record key is
the count per user."""

from __future__ import annotations

from typing import Any

from millpond.streams import App


def topic(config: Any, key: str, default: str) -> str:
    return (config.get(key) or default).removeprefix("kafka.")


def page_view_counts(config: Any) -> App:
    app = App()
    views = app.source(topic(config, "views.stream", "page-views"))
    views.count("page-view-counts").to(topic(config, "counts.stream", "user-counts"))
    return app

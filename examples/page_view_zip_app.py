"""Example 3 as a streams app: page views enriched with the viewer's ZIP code, sent keyed by
ZIP code (the StreamTask version is page_view_zip_enricher.py; a test checks both give the
same output).

Both inputs are keyed (and partitioned) by user_id, so one keyed ``process`` operator sees a
user's profile changes and views in order. Each side is tagged on its way into the merge;
the operator keeps, per user, the ZIP code of the latest profile and the views that arrived
before any profile, and lets those out when the profile comes. The sink sets the output key
to the ZIP code (no repartition: nothing downstream keeps state by it).
"""

from __future__ import annotations

from typing import Any

from millpond.streams import App, Context


def topic(config: Any, key: str, default: str) -> str:
    return (config.get(key) or default).removeprefix("kafka.")


def enrich(ctx: Context, tagged: list[Any]) -> None:
    """A profile change or a view of user ``ctx.key``; state: ``{"zip"}`` once the user has
    a profile, ``{"pending": [views]}`` while views wait for one."""
    side, record = tagged
    state = ctx.state or {}
    if side == "profile":
        if record is None:  # the profile was deleted: views wait again
            ctx.state = None
            return
        for view in state.get("pending", []):
            ctx.emit({**view, "zip": record["zip"]})
        ctx.state = {"zip": record["zip"]}
    elif "zip" in state:
        ctx.emit({**record, "zip": state["zip"]})
    else:
        ctx.state = {"pending": [*state.get("pending", []), record]}


def zip_enricher(config: Any) -> App:
    app = App()
    profiles = app.source(topic(config, "profiles.stream", "user-profiles"))
    views = app.source(topic(config, "views.stream", "page-views"))
    (profiles.map(lambda profile: ["profile", profile])
     .merge(views.map(lambda view: ["view", view]))
     .process("user-zips", enrich)
     .to(topic(config, "output.stream", "page-views-by-zip"), key=lambda view: view["zip"]))
    return app

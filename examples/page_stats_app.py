"""The Streams API guide's example (docs/streams-guide.md): page views split by kind, item
views re-keyed and counted per item, checkouts aggregated per user (several aggregations in
one store), every other page counted per user."""

from __future__ import annotations

from millpond.streams import App, count, maximum

app = App()
views = app.source("page-views")
items, checkouts, other = views.branch(
    lambda v: v["page"].startswith("/item/"),
    lambda v: v["page"] == "/checkout",
    default=True)
(items.map(lambda v: {"item": v["page"].removeprefix("/item/"), "user_id": v["user_id"]})
 .key_by("by-item", lambda v: v["item"])
 .count("item-views")
 .to("item-view-counts"))
(checkouts.agg("checkouts", n=count(), last_ms=maximum(lambda v: v["timestamp"]))
 .to("user-checkouts"))
other.filter(lambda v: v["page"] != "/help").count("other-views").to("other-view-counts")

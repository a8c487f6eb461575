"""Dataflow apps the streams tests run (app.class=tests.streams.apps:<name>)."""

from __future__ import annotations

from typing import Any

from millpond.streams import App, count, total

# The counting job of tests/jobs/counting.py as a dataflow: every new count per user.
counts = App()
counts.source("page-views").map(lambda v: v["user_id"]).count("counts").to("user-counts")

# Several aggregations in one store, and a stateful_map that keeps the last two items.
stats = App()
orders = stats.source("orders")
orders.filter(lambda v: v["amount"] > 0).agg(
    "spend", n=count(), spent=total(lambda v: v["amount"])).to("spend")
orders.stateful_map(
    "last-two", lambda state, v: ((state or [])[-1:] + [v["item"]],
                                  (state or [])[-1:] + [v["item"]])).to("recent")

# Filter, re-key by the page a user viewed, count per page (through an internal topic).
pages = App()
(pages.source("page-views").filter(lambda v: v["page"] != "/health")
 .key_by("by-page", lambda v: v["page"]).count("page-counts").to("page-counts"))


def _remember(ctx, value):  # type: ignore[no-untyped-def]
    ctx.state = value
    ctx.set_timer(ctx.timestamp + 1000)


def _forget(ctx, timer):  # type: ignore[no-untyped-def]
    ctx.emit(ctx.state)
    ctx.state = None


# A process operator with timers, for the compile test
timed = App()
timed.source("page-views").process("last-view", _remember, _forget).to("expired")


def views_by_page_and_user(config: Any) -> App:
    """Page views of topic ``views.topic`` (keyed by user): counted per page through a
    key_by (``page-counts``, JSON keys) and aggregated per user on the source key
    (``user-stats``: views and seconds spent)."""
    app = App()
    views = app.source(config.get("views.topic") or "page-views")
    views.key_by("by-page", lambda v: v["page"]).count("page-counts")
    views.agg("user-stats", n=count(), seconds=total(lambda v: v["seconds"]))
    return app

# Sliding windows, an interval join and an as-of join: their stores' keys are their own.
timed_joins = App()
trades, quotes = timed_joins.source("trades"), timed_joins.source("quotes")
rates = timed_joins.versioned_table("rates", "rate-versions", 60_000)
trades.sliding_window(1_000).count("trades-per-second").final().to("rates-out")
(trades.interval_join("quoted", quotes, -500, 0, lambda t, q: [t, q]).to("quoted-out"))
trades.join_asof(rates, lambda t, r: [t, r]).to("valued")


def order_regions(config: Any) -> App:
    """Orders joined with a global table of customers (looked up by the order's customer,
    not its key) and of regions (by the order's key): topics from the properties."""
    app = App()
    customers = app.global_table(config.get("customers.topic", "customers"), "customers")
    orders = app.source(config.get("orders.topic", "orders"))
    (orders.join(customers, lambda order, c: {**order, "region": c and c["region"]},
                 how="left", key=lambda order: order["customer"])
     .to(config.get("out.topic", "orders-with-region")))
    return app

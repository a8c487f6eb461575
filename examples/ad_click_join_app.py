"""Example 4 as a streams app: ad clicks joined to ad impressions within a time window (the
StreamTask version is ad_click_join.py; a test checks both send the same joins).

Both inputs are keyed by impression_id; ``window_join`` pairs an impression and a click of
one id whose ``timestamp`` fields are at most ``join.window.ms`` apart, and lets each side's
events wait ``join.lateness.ms`` longer for out-of-order partners.
"""

from __future__ import annotations

from typing import Any

from millpond.streams import App


def joined(impression: dict[str, Any], click: dict[str, Any]) -> dict[str, Any]:
    return {"impression_id": impression["impression_id"], "ad_id": impression["ad_id"],
            "user_id": impression["user_id"], "placement": impression["placement"],
            "impression_ts": impression["timestamp"], "click_id": click["click_id"],
            "click_ts": click["timestamp"],
            "delay_ms": click["timestamp"] - impression["timestamp"]}


def ad_click_join(config: Any) -> App:
    def topic(key: str, default: str) -> str:
        return (config.get(key) or default).removeprefix("kafka.")

    app = App()
    impressions = app.source(topic("join.impressions.stream", "ad-impressions"))
    clicks = app.source(topic("join.clicks.stream", "ad-clicks"))
    (impressions.window_join("ad-clicks", clicks, int(config.get("join.window.ms") or 600_000),
                             joined, grace_ms=int(config.get("join.lateness.ms") or 60_000),
                             timestamp=lambda event: int(event["timestamp"]))
     .to(topic("output.stream", "ad-click-joins")))
    return app

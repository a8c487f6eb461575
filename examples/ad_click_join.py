"""Example 4, stream-stream join: ad clicks joined to ad impressions within a time window.

Both inputs are keyed (and partitioned) by impression_id. An event whose partner is already
buffered (``impressions`` / ``clicks`` stores, keyed by impression_id) and lies within
``join.window.ms`` of it in event time is joined: the pair goes to ``output.stream`` keyed by
impression_id and the partner is deleted. Otherwise the event is buffered, and indexed in the
``join-expiry`` store under ``impression|<timestamp, 13 digits>|<id>`` (or ``click|...``):
keys ordered by kind, then time.

Each stream's event time (watermark: the largest timestamp seen, stored as
``watermark|impression`` / ``watermark|click``) decides what can still match: once the clicks'
watermark minus ``join.lateness.ms`` is more than ``join.window.ms`` past a buffered
impression, no click to come can join it. ``window()`` (every ``task.window.ms``) purges such
impressions, and likewise clicks, with one range scan per kind over the expiry index, from the
kind's first key up to ``<kind>|<watermark - lateness - window>``. As long as each stream is out
of order by at most ``join.lateness.ms``, purging never loses a match, so the joined output does
not depend on how the two inputs interleave.
"""

from __future__ import annotations

from examples.streams import input_topic
from millpond import OutgoingMessageEnvelope, StreamTask

KINDS = ("impression", "click")


def expiry_key(kind: str, ts: int, impression_id: str) -> str:
    return f"{kind}|{ts:013d}|{impression_id}"


class AdClickJoin(StreamTask):
    def init(self, context):
        config = context.config
        self.buffers = {"impression": context.get_store("impressions"),
                        "click": context.get_store("clicks")}
        self.expiry = context.get_store("join-expiry")
        self.output = config.get("output.stream", "kafka.ad-click-joins")
        self.window_ms = int(config.get("join.window.ms", "600000"))
        self.lateness_ms = int(config.get("join.lateness.ms", "60000"))
        self.kind_of = {
            input_topic(config, "join.impressions.stream", "kafka.ad-impressions"): "impression",
            input_topic(config, "join.clicks.stream", "kafka.ad-clicks"): "click",
        }
        self.watermarks = {k: self.expiry.get(f"watermark|{k}") for k in KINDS}

    def process(self, envelope, collector, coordinator):
        kind = self.kind_of[envelope.stream]
        other = "click" if kind == "impression" else "impression"
        event, imp_id = envelope.message, envelope.key
        ts = int(event["timestamp"])
        if self.watermarks[kind] is None or ts > self.watermarks[kind]:
            self.watermarks[kind] = ts
            self.expiry.put(f"watermark|{kind}", ts)

        partner = self.buffers[other].get(imp_id)
        if partner is not None and abs(partner["timestamp"] - ts) <= self.window_ms:
            impression, click = (event, partner) if kind == "impression" else (partner, event)
            collector.send(OutgoingMessageEnvelope(self.output, key=imp_id, message={
                "impression_id": imp_id, "ad_id": impression["ad_id"],
                "user_id": impression["user_id"], "placement": impression["placement"],
                "impression_ts": impression["timestamp"], "click_id": click["click_id"],
                "click_ts": click["timestamp"],
                "delay_ms": click["timestamp"] - impression["timestamp"]}))
            self.buffers[other].delete(imp_id)
            self.expiry.delete(expiry_key(other, partner["timestamp"], imp_id))
            return
        mine = self.buffers[kind]
        previous = mine.get(imp_id)
        if previous is not None:  # a repeated id replaces the buffered event
            self.expiry.delete(expiry_key(kind, previous["timestamp"], imp_id))
        mine.put(imp_id, event)
        self.expiry.put(expiry_key(kind, ts, imp_id), imp_id)

    def window(self, collector, coordinator):
        self.purge()

    def on_end_of_stream(self, collector, coordinator):
        self.purge()

    def purge(self) -> None:
        """Delete buffered events that no event still to come on the other stream can match."""
        for kind in KINDS:
            other_wm = self.watermarks["click" if kind == "impression" else "impression"]
            if other_wm is None:
                continue
            horizon = other_wm - self.lateness_ms - self.window_ms  # ts < horizon: expired
            if horizon <= 0:
                continue
            with self.expiry.range(f"{kind}|", expiry_key(kind, horizon, "")) as expired:
                rows = list(expired)
            buffer = self.buffers[kind]
            for key, imp_id in rows:
                buffered = buffer.get(imp_id)
                if buffered is not None and expiry_key(kind, buffered["timestamp"], imp_id) == key:
                    buffer.delete(imp_id)
            self.expiry.delete_all(key for key, _ in rows)

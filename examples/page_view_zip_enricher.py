"""Example 3, stream-table join: page views enriched with the viewer's ZIP code.

The task reads the user-profile change stream into the ``user-zips`` store (user_id -> ZIP
code; a null profile deletes it) and, for every page view, looks the user's ZIP code up and
emits the view with a ``zip`` field to ``output.stream``, keyed by ZIP code, so that a later
stage aggregating by ZIP code finds all of a ZIP code's views in one partition.

A view whose user has no profile yet is not dropped: it waits in the ``pending-views`` store
under ``<user_id>|<view_id>`` and goes out (in view order, one prefix scan) when that user's
profile arrives. Both inputs must be partitioned by user_id with equal partition counts.
"""

from __future__ import annotations

from examples.streams import input_topic
from millpond import OutgoingMessageEnvelope, StreamTask


class PageViewZipEnricher(StreamTask):
    def init(self, context):
        config = context.config
        self.zips = context.get_store("user-zips")
        self.pending = context.get_store("pending-views")
        self.output = config.get("output.stream", "kafka.page-views-by-zip")
        self.profiles_topic = input_topic(config, "enrich.profiles.stream", "kafka.user-profiles")

    def process(self, envelope, collector, coordinator):
        if envelope.stream == self.profiles_topic:
            self.on_profile(envelope.key, envelope.message, collector)
        else:
            self.on_view(envelope.message, collector)

    def on_profile(self, user, profile, collector) -> None:
        if profile is None:
            self.zips.delete(user)
            return
        had_zip = self.zips.get(user) is not None
        self.zips.put(user, profile["zip"])
        if had_zip:
            return  # nothing can be waiting for a user whose ZIP code was known
        with self.pending.prefix(f"{user}|") as waiting:
            views = list(waiting)
        for _, view in views:
            self.emit(view, profile["zip"], collector)
        self.pending.delete_all(key for key, _ in views)

    def on_view(self, view, collector) -> None:
        zip_code = self.zips.get(view["user_id"])
        if zip_code is None:
            self.pending.put(f"{view['user_id']}|{view['view_id']}", view)
        else:
            self.emit(view, zip_code, collector)

    def emit(self, view, zip_code, collector) -> None:
        collector.send(OutgoingMessageEnvelope(
            self.output, key=zip_code, message={**view, "zip": zip_code}))

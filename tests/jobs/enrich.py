"""A stream-table enrichment job: page views joined with a profile table that the
``profiles`` store holds from its side inputs (a compacted topic of user -> profile)."""

from __future__ import annotations

from millpond import OutgoingMessageEnvelope, StreamTask


class ProfileEnricher(StreamTask):
    """Emits each view with the user's current profile (None without one) and the number of
    profiles the task's store held at ``init()`` to ``enriched.stream``; refuses to write the side-input store when ``try.write`` is set."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.profiles = context.get_store("profiles")
        self.output = context.config.get("enriched.stream")
        self.try_write = context.config.get("try.write") == "true"
        with self.profiles.all() as entries:  # the table as init() sees it: bootstrapped
            self.size_at_init = sum(1 for _ in entries)

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        user = envelope.message["user_id"]
        if self.try_write:
            self.profiles.put(user, {"name": "written by the task"})
        collector.send(OutgoingMessageEnvelope(self.output, key=user, message={
            "user_id": user, "i": envelope.message["i"], "profile": self.profiles.get(user),
            "size_at_init": self.size_at_init}))

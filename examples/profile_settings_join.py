"""Example 2, table-table join: user profiles joined with user settings by user_id.

Both inputs are change streams of a table keyed by user_id (a null message deletes the row).
The task materializes each table in its own store (``profiles``, ``settings``); on every change
to either side it updates that store, looks up the other side, and emits the joined row
``{"user_id", "profile", "settings"}`` (a side is null while it has no row) to
``output.stream``, keyed by user_id. When both sides are gone it emits a tombstone, so a
compacted output topic holds exactly the current join. Both inputs must be partitioned by
user_id with the same partition count: task N then holds every row of its users.

Run with ``task.processing.guarantee=exactly-once``: store changelogs, outputs and input offsets
commit in one Kafka transaction, so a read_committed consumer sees each change joined once.
"""

from __future__ import annotations

from examples.streams import input_topic
from millpond import OutgoingMessageEnvelope, StreamTask


class ProfileSettingsJoin(StreamTask):
    def init(self, context):
        config = context.config
        self.profiles = context.get_store("profiles")
        self.settings = context.get_store("settings")
        self.output = config.get("output.stream", "kafka.user-profile-settings")
        profiles_topic = input_topic(config, "join.profiles.stream", "kafka.user-profiles")
        settings_topic = input_topic(config, "join.settings.stream", "kafka.user-settings")
        # input topic -> (the store it updates, the store it joins with)
        self.sides = {profiles_topic: (self.profiles, self.settings),
                      settings_topic: (self.settings, self.profiles)}
        self.profiles_topic = profiles_topic

    def process(self, envelope, collector, coordinator):
        user = envelope.key
        mine, other = self.sides[envelope.stream]
        if envelope.message is None:
            mine.delete(user)
        else:
            mine.put(user, envelope.message)
        if envelope.stream == self.profiles_topic:
            profile, settings = envelope.message, other.get(user)
        else:
            profile, settings = other.get(user), envelope.message
        joined = None if profile is None and settings is None else {
            "user_id": user, "profile": profile, "settings": settings}
        collector.send(OutgoingMessageEnvelope(self.output, key=user, message=joined))

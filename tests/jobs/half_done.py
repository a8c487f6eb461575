"""A counter whose ``poison`` messages write to the store, then raise: the runtime must
undo those writes when the dead-letter policy skips the message."""

from __future__ import annotations

from millpond import StreamTask


class HalfDoneCounter(StreamTask):
    """Counts messages per ``user_id``; a message with ``poison`` set first bumps its user,
    puts a trace key and deletes ``user-2``, then raises."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.counts = context.get_store("counts")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        user = envelope.message["user_id"]
        self.counts.put(user, (self.counts.get(user) or 0) + 1)
        if envelope.message.get("poison"):
            self.counts.put(f"trace-{envelope.offset}", 1)
            self.counts.delete("user-2")
            raise ValueError(f"half done at offset {envelope.offset}")

"""The compatibility fixture's job: a per-user count and a per-user sum, two changelogged stores.

Kept here, beside the fixture it wrote, so the fixture's ``task.class`` never changes meaning:
``counts`` (string -> json) holds the number of messages per ``user_id``, ``sums``
(string -> long, millpond's order-preserving 8-byte layout) the sum of their ``amount``. A
message with ``"reset": true`` deletes the user from both stores (changelog tombstones).
Only ``millpond``'s public API (``from millpond import StreamTask``) is used.
"""

from __future__ import annotations

from millpond import StreamTask


class CountSum(StreamTask):
    def init(self, context):  # type: ignore[no-untyped-def]
        self.counts = context.get_store("counts")
        self.sums = context.get_store("sums")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        msg = envelope.message
        user = msg["user_id"]
        if msg.get("reset"):
            self.counts.delete(user)
            self.sums.delete(user)
            return
        self.counts.put(user, (self.counts.get(user) or 0) + 1)
        self.sums.put(user, (self.sums.get(user) or 0) + msg["amount"])

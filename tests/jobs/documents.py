"""A read-then-write task over ~1 KB values (the README's pattern with big values): each
message replaces its key's document, counting the versions."""

from __future__ import annotations

from millpond import StreamTask


class DocumentWriter(StreamTask):
    """``docs[id] = {"n": previous n + 1, "body": message body}``."""

    def init(self, context):  # type: ignore[no-untyped-def]
        self.docs = context.get_store("docs")

    def process(self, envelope, collector, coordinator):  # type: ignore[no-untyped-def]
        msg = envelope.message
        doc = self.docs.get(msg["id"])
        self.docs.put(msg["id"], {"n": (doc["n"] if doc else 0) + 1, "body": msg["body"]})

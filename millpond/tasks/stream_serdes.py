"""The serdes of input and output streams (``systems.<s>.streams.<topic>.samza.*.serde``)."""

from __future__ import annotations

from millpond.api import SerdePair
from millpond.config import Config, StreamRef
from millpond.serdes import build_serde


class StreamSerdes:
    """Builds each stream's (key, message) serdes once and hands them out."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._by_topic: dict[str, SerdePair] = {}

    def of(self, ref: StreamRef) -> SerdePair:
        """The key and message serde of ``ref`` (None where the stream has none)."""
        names = self.config.stream_serdes(ref)
        out = []
        for kind, name in zip(("key", "msg"), names, strict=True):
            key = f"systems.{ref.system}.streams.{ref.topic}.samza.{kind}.serde"
            out.append(build_serde(self.config.serde_spec(name, key)) if name else None)
        return SerdePair(out[0], out[1])

    def of_input(self, topic: str) -> SerdePair:
        """The serdes of input ``topic`` of the kafka system, cached (the hot path)."""
        hit = self._by_topic.get(topic)
        if hit is None:
            hit = self._by_topic[topic] = self.of(StreamRef("kafka", topic))
        return hit

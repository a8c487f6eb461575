"""The ``systems.<system>.*`` settings: Kafka connection, client pass-through, stream serdes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from millpond.config.properties import Properties
from millpond.config.values import with_prefix

_STREAM_KEY = re.compile(r"streams\.(?P<topic>.+)\.samza\.(?P<setting>.+)")


@dataclass(frozen=True)
class StreamConfig:
    """Per-stream serdes from ``systems.<sys>.streams.<topic>.samza.key.serde|msg.serde``."""

    topic: str
    key_serde: str | None = None
    msg_serde: str | None = None


@dataclass(frozen=True)
class SystemConfig:
    """One system. ``consumer``/``producer`` are librdkafka settings (prefix removed)."""

    name: str
    bootstrap_servers: str | None = None
    consumer: dict[str, str] = field(default_factory=dict)
    producer: dict[str, str] = field(default_factory=dict)
    key_serde: str | None = None
    msg_serde: str | None = None
    streams: dict[str, StreamConfig] = field(default_factory=dict)

    def stream_serdes(self, topic: str) -> tuple[str | None, str | None]:
        """(key serde, msg serde) of ``topic``: the stream's own, else the system default."""
        stream = self.streams.get(topic)
        return (
            stream.key_serde if stream and stream.key_serde else self.key_serde,
            stream.msg_serde if stream and stream.msg_serde else self.msg_serde,
        )


def parse_systems(props: Properties) -> dict[str, SystemConfig]:
    """All systems mentioned by a ``systems.<name>.<setting>`` key."""
    parts = (key.split(".", 2) for key in props if key.startswith("systems."))
    names = dict.fromkeys(p[1] for p in parts if len(p) == 3 and p[1] and p[2])
    return {name: _parse_system(with_prefix(props, f"systems.{name}."), name) for name in names}


def _parse_system(own: dict[str, str], name: str) -> SystemConfig:
    """``bootstrap.servers`` falls back to the consumer's, then the producer's setting."""
    consumer = with_prefix(own, "consumer.")
    producer = with_prefix(own, "producer.")
    return SystemConfig(
        name=name,
        bootstrap_servers=_text(own.get("bootstrap.servers"))
        or _text(consumer.get("bootstrap.servers"))
        or _text(producer.get("bootstrap.servers")),
        consumer=consumer,
        producer=producer,
        key_serde=_text(own.get("samza.key.serde")),
        msg_serde=_text(own.get("samza.msg.serde")),
        streams=_parse_streams(own),
    )


def _parse_streams(own: dict[str, str]) -> dict[str, StreamConfig]:
    serdes: dict[str, dict[str, str | None]] = {}
    for key, value in own.items():
        match = _STREAM_KEY.fullmatch(key)
        if match:
            settings = serdes.setdefault(match["topic"], {})
            if match["setting"] in ("key.serde", "msg.serde"):
                settings[match["setting"]] = _text(value)
    return {
        topic: StreamConfig(topic, s.get("key.serde"), s.get("msg.serde"))
        for topic, s in serdes.items()
    }


def _text(value: str | None) -> str | None:
    """Stripped value, None when unset or blank."""
    return (value.strip() or None) if value is not None else None

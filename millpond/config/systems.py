"""The ``systems.<system>.*`` settings: Kafka connection, client pass-through, stream serdes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from millpond.config.errors import ConfigError
from millpond.config.librdkafka import JAVA_ONLY, Client, java_only_reason, known_to_librdkafka
from millpond.config.properties import Properties
from millpond.config.values import where, with_prefix

_STREAM_KEY = re.compile(r"streams\.(?P<topic>.+)\.samza\.(?P<setting>.+)")
_STREAM_ID_KEY = re.compile(r"streams\.(?P<id>.+)\.samza\.(?P<setting>[^.]+(?:\.serde|\.name)?)")
_DEFAULT_SYSTEM = "kafka"


@dataclass(frozen=True)
class StreamConfig:
    """Per-stream serdes from ``systems.<sys>.streams.<topic>.samza.key.serde|msg.serde``."""

    topic: str
    key_serde: str | None = None
    msg_serde: str | None = None


@dataclass(frozen=True)
class SystemConfig:
    """One system. ``client`` holds the librdkafka settings written once for every client
    (``systems.<s>.security.protocol``, ``sasl.*``, ``ssl.*``, ...: any key librdkafka's
    consumer and producer both know); ``consumer``/``producer`` are each client's own
    (prefix removed), which win over ``client``. ``ignored`` maps each Java-client-only key
    left out of them (full key) to the reason."""

    name: str
    bootstrap_servers: str | None = None
    client: dict[str, str] = field(default_factory=dict)
    consumer: dict[str, str] = field(default_factory=dict)
    producer: dict[str, str] = field(default_factory=dict)
    key_serde: str | None = None
    msg_serde: str | None = None
    streams: dict[str, StreamConfig] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)

    def stream_serdes(self, topic: str) -> tuple[str | None, str | None]:
        """(key serde, msg serde) of ``topic``: the stream's own, else the system default."""
        stream = self.streams.get(topic)
        return (
            stream.key_serde if stream and stream.key_serde else self.key_serde,
            stream.msg_serde if stream and stream.msg_serde else self.msg_serde,
        )


# Client settings confluent-kafka's Python layer takes as typed values (a callable, a bool),
# never as librdkafka's strings: from a properties file each would fail deep inside the
# client's constructor with a TypeError, so each is refused here at its line, with why.
_PYTHON_ONLY = {
    "delivery.report.only.error": (
        "millpond sets it itself: a task's producer reports errors only and reads the "
        "changelog offsets its checkpoints record from the partitions' ends; its other "
        "producers (offline tools, Spark) take them from every delivered record's report"),
    **{cb: "a callback of the Python client (a function), which a properties file cannot "
           "give; millpond sets its own"
       for cb in ("error_cb", "throttle_cb", "stats_cb", "on_delivery", "dr_cb", "dr_msg_cb",
                  "logger", "oauth_cb", "on_commit")},
}


def _refuse_python_only(props: Properties) -> None:
    """A ConfigError at the first ``systems.<s>.[consumer.|producer.]<setting>`` key whose
    setting is one of :data:`_PYTHON_ONLY`."""
    for key in props:
        parts = key.split(".", 2)
        if len(parts) < 3 or parts[0] != "systems":
            continue
        setting = parts[2]
        for client in ("consumer.", "producer."):
            setting = setting.removeprefix(client)
        why = _PYTHON_ONLY.get(setting)
        if why is not None:
            file, line = where(props, key)
            raise ConfigError(f"cannot be set: {why}", key=key, file=file, line=line)


def parse_systems(props: Properties) -> dict[str, SystemConfig]:
    """All systems mentioned by a ``systems.<name>.<setting>`` key (or a ``streams.<id>``)."""
    _refuse_python_only(props)
    parts = (key.split(".", 2) for key in props if key.startswith("systems."))
    names = dict.fromkeys(p[1] for p in parts if len(p) == 3 and p[1] and p[2])
    by_id = _stream_ids(props)
    names.update(dict.fromkeys(by_id))
    return {name: _parse_system(with_prefix(props, f"systems.{name}."), name, by_id.get(name, {}))
            for name in names}


def client_key_reason(system: str, client: Client, key: str) -> str | None:
    """Why ``systems.<system>.<client>.<key>`` is not given to librdkafka (None: it is)."""
    return java_only_reason(key, client)


def _client_settings(own: dict[str, str], name: str, client: Client,
                     ignored: dict[str, str]) -> dict[str, str]:
    settings = with_prefix(own, f"{client}.")
    kept = {}
    for key, value in settings.items():
        reason = None if key == "bootstrap.servers" else client_key_reason(name, client, key)
        if reason is None:
            kept[key] = value
        else:
            ignored[f"systems.{name}.{client}.{key}"] = reason
    return kept


# Keys under systems.<s>. that are millpond's or Samza's, never a client setting.
_NOT_CLIENT = ("consumer.", "producer.", "samza.", "streams.", "default.stream.")


def _shared_settings(own: dict[str, str]) -> dict[str, str]:
    """``systems.<s>.<key>`` settings for every client: the keys both librdkafka clients know
    (other keys there are Samza's or the user's own and stay out of the clients)."""
    return {key: value for key, value in own.items()
            if key != "bootstrap.servers" and not key.startswith(_NOT_CLIENT)
            and key not in JAVA_ONLY and known_to_librdkafka(key, "consumer")
            and known_to_librdkafka(key, "producer")}


def _parse_system(own: dict[str, str], name: str,
                  by_id: dict[str, dict[str, str | None]]) -> SystemConfig:
    """``bootstrap.servers`` falls back to the consumer's, then the producer's setting."""
    ignored: dict[str, str] = {}
    consumer = _client_settings(own, name, "consumer", ignored)
    producer = _client_settings(own, name, "producer", ignored)
    return SystemConfig(
        name=name,
        bootstrap_servers=_text(own.get("bootstrap.servers"))
        or _text(consumer.get("bootstrap.servers"))
        or _text(producer.get("bootstrap.servers")),
        client=_shared_settings(own),
        consumer=consumer,
        producer=producer,
        key_serde=_text(own.get("samza.key.serde"))
        or _text(own.get("default.stream.samza.key.serde")),
        msg_serde=_text(own.get("samza.msg.serde"))
        or _text(own.get("default.stream.samza.msg.serde")),
        streams=_parse_streams(own, by_id),
        ignored=ignored,
    )


def _stream_ids(props: Properties) -> dict[str, dict[str, dict[str, str | None]]]:
    """Serdes set as ``streams.<id>.samza.key.serde|msg.serde`` (Samza's stream ids), per
    system and topic: the topic is ``samza.physical.name`` (default: the id), the system
    ``samza.system`` (default: kafka)."""
    ids: dict[str, dict[str, str]] = {}
    for key, value in props.items():
        if key.startswith("streams."):
            match = _STREAM_ID_KEY.fullmatch(key)
            if match:
                ids.setdefault(match["id"], {})[match["setting"]] = value.strip()
    out: dict[str, dict[str, dict[str, str | None]]] = {}
    for stream_id, settings in ids.items():
        serdes = {k: settings.get(k) or None for k in ("key.serde", "msg.serde")}
        if not any(serdes.values()):
            continue
        system = settings.get("system") or _DEFAULT_SYSTEM
        topic = settings.get("physical.name") or stream_id
        out.setdefault(system, {})[topic] = serdes
    return out


def _parse_streams(own: dict[str, str],
                   by_id: dict[str, dict[str, str | None]]) -> dict[str, StreamConfig]:
    """Per-topic serdes; ``systems.<s>.streams.<topic>.*`` wins over ``streams.<id>.*``."""
    serdes: dict[str, dict[str, str | None]] = {t: dict(s) for t, s in by_id.items()}
    for key, value in own.items():
        match = _STREAM_KEY.fullmatch(key)
        if match:
            settings = serdes.setdefault(match["topic"], {})
            if match["setting"] in ("key.serde", "msg.serde") and _text(value):
                settings[match["setting"]] = _text(value)
    return {
        topic: StreamConfig(topic, s.get("key.serde"), s.get("msg.serde"))
        for topic, s in serdes.items()
    }


def _text(value: str | None) -> str | None:
    """Stripped value, None when unset or blank."""
    return (value.strip() or None) if value is not None else None

"""The ``stores.<name>.*`` settings: engine, serdes, changelog, cache and engine tuning."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from millpond.config.errors import ConfigError, ConfigWarning
from millpond.config.properties import Properties
from millpond.config.samza_keys import samza_store_key
from millpond.config.schema import bool_default, int_default, store_keys, str_default
from millpond.config.values import (
    StreamRef,
    describe,
    error,
    get_bool,
    get_choice,
    get_int,
    get_optional_int,
    parse_stream,
    sub_properties,
    where,
    with_prefix,
)

StoreFactory = Literal["rocksdb", "inmemory"]

FACTORIES: dict[str, StoreFactory] = {
    "rocksdb": "rocksdb",
    "inmemory": "inmemory",
    "org.apache.samza.storage.kv.RocksDbKeyValueStorageEngineFactory": "rocksdb",
    "org.apache.samza.storage.kv.KeyValueStorageEngineFactory": "rocksdb",
    "org.apache.samza.storage.kv.inmemory.InMemoryKeyValueStorageEngineFactory": "inmemory",
}

# Every single-setting key under stores.<name>. (the schema's; side inputs and backup.enabled
# included), so none is reported as unknown.
KNOWN_KEYS = store_keys()
CHANGELOG_TOPIC_PREFIX = "changelog.kafka."
# Samza's per-job store defaults: stores.default.<key> applies to every store without its own.
DEFAULTS_STORE = "default"
DEFAULTABLE = ("changelog.replication.factor", "changelog.min.compaction.lag.ms")
MIN_COMPACTION_LAG = "min.compaction.lag.ms"
_S = "stores.<store>."
# Samza's StorageConfig.DEFAULT_CHANGELOG_MAX_MSG_SIZE_BYTES (1 MiB). Every default here comes
# from millpond.config.schema, which documents it.
DEFAULT_MAX_MESSAGE_SIZE = int_default(_S + "changelog.max.message.size.bytes")

# The object cache's bounds per store and task (millpond.stores.cached has the same defaults).
# Samza's defaults are 1000 / 500; millpond's are larger because in Python a cache miss
# (engine get + deserialize) and a write-down (serialize + engine put + changelog record) cost
# far more than a hit, and the dirty bound is what lets a commit interval's repeated writes
# to a key coalesce into one. object.cache.max.bytes bounds the estimated memory (Kafka
# Streams' statestore.cache.max.bytes); 0 for it or object.cache.size turns the cache off.
DEFAULT_OBJECT_CACHE_SIZE = int_default(_S + "object.cache.size")
DEFAULT_WRITE_BATCH_SIZE = int_default(_S + "write.batch.size")
DEFAULT_OBJECT_CACHE_MAX_BYTES = int_default(_S + "object.cache.max.bytes")
DEFAULT_DISALLOW_LARGE = bool_default(_S + "disallow.large.messages")
DEFAULT_DROP_LARGE = bool_default(_S + "drop.large.messages")
DEFAULT_BACKUP_ENABLED = bool_default(_S + "backup.enabled")
DEFAULT_BAD_RECORDS = str_default(_S + "changelog.bad.records")


@dataclass(frozen=True)
class StoreConfig:
    """One key-value store. ``properties`` holds every ``stores.<name>.*`` key, prefix removed."""

    name: str
    factory: StoreFactory
    key_serde: str
    msg_serde: str
    changelog: StreamRef | None = None
    changelog_replication_factor: int | None = None
    changelog_topic_config: dict[str, str] = field(default_factory=dict)
    object_cache_size: int = DEFAULT_OBJECT_CACHE_SIZE  # entries; 0 = no cache
    write_batch_size: int = DEFAULT_WRITE_BATCH_SIZE  # dirty entries; 0 = write-through
    object_cache_max_bytes: int = DEFAULT_OBJECT_CACHE_MAX_BYTES  # estimated; 0 = no cache
    properties: Mapping[str, str] = field(default_factory=dict)  # a Properties when parsed
    # Samza side inputs: the store is filled from these streams (not from a changelog)
    # through the processor class named by side.inputs.processor.factory.
    side_inputs: tuple[StreamRef, ...] = ()
    side_inputs_processor: str | None = None
    # side.inputs.broadcast: every task reads every partition of the side inputs (else
    # task N reads partition N)
    side_inputs_broadcast: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE  # changelog.max.message.size.bytes
    disallow_large_messages: bool = DEFAULT_DISALLOW_LARGE  # a larger value stops the job
    drop_large_messages: bool = DEFAULT_DROP_LARGE  # a larger value is skipped (counted, logged)
    # changelog.bad.records: a restored record the serdes cannot decode stops ("fail") or is
    # left out, counted and logged ("skip")
    bad_records: str = DEFAULT_BAD_RECORDS

    backup_enabled: bool = DEFAULT_BACKUP_ENABLED  # stores.<name>.backup.enabled (when job.state.backup.uri is set)

    @property
    def large_messages(self) -> Literal["disallow", "drop"] | None:
        """Samza's large-message policy: disallow wins over drop; None = no check."""
        if self.disallow_large_messages:
            return "disallow"
        return "drop" if self.drop_large_messages else None


def parse_stores(
    props: Properties, changelog_system: str, default_changelog: str | None = None
) -> dict[str, StoreConfig]:
    """All configured stores; bare changelog topics go to ``changelog_system``.

    ``default_changelog`` (a format string with ``{store}``), given when
    ``job.changelog.system`` is set, names the changelog of stores that name none.
    """
    parts = (key.split(".", 2) for key in props if key.startswith("stores."))
    names = dict.fromkeys(p[1] for p in parts if len(p) == 3 and p[1] and p[2])
    if DEFAULTS_STORE in names and f"stores.{DEFAULTS_STORE}.factory" not in props:
        del names[DEFAULTS_STORE]  # Samza's stores.default.*: defaults, not a store
    return {name: _parse_store(props, name, changelog_system, default_changelog)
            for name in names}


def _with_defaults(props: Properties, prefix: str) -> Properties:
    """``props`` plus ``stores.default.<key>`` copied under ``prefix`` where not set."""
    missing = [k for k in DEFAULTABLE
               if prefix + k not in props and f"stores.{DEFAULTS_STORE}.{k}" in props]
    if not missing or prefix == f"stores.{DEFAULTS_STORE}.":
        return props
    merged = props.copy()
    for k in missing:
        source = f"stores.{DEFAULTS_STORE}.{k}"
        file, line = props.location(source) or ("<default>", 0)
        merged.set(prefix + k, props[source], file, line)
    return merged


def _parse_store(
    props: Properties, name: str, changelog_system: str, default_changelog: str | None
) -> StoreConfig:
    prefix = f"stores.{name}."
    for sub in with_prefix(props, prefix):
        _warn_if_unknown(props, prefix, sub)
    props = _with_defaults(props, prefix)
    own = sub_properties(props, prefix)  # with each key's file and line (RocksDB options)
    anchor = prefix + "factory" if "factory" in own else prefix + next(iter(own))
    factory = FACTORIES.get(_required(props, own, name, "factory", anchor))
    if factory is None:
        raise error(
            props, prefix + "factory",
            f"unknown store factory {own['factory']!r}; use rocksdb, inmemory or a Samza "
            f"factory class ({', '.join(k for k in FACTORIES if '.' in k)})",
        )
    side_inputs, processor, broadcast = _side_inputs(props, own, prefix)
    changelog = own.get("changelog", "").strip()
    if changelog and side_inputs:
        raise error(props, prefix + "changelog",
                    f"store {name!r} has side inputs ({prefix}side.inputs): it is filled from "
                    "them, so it cannot have a changelog (as in Samza); remove one of the two")
    if not changelog and default_changelog and not side_inputs:
        changelog = default_changelog.format(store=name)
    return StoreConfig(
        name=name,
        factory=factory,
        key_serde=_required(props, own, name, "key.serde", anchor),
        msg_serde=_required(props, own, name, "msg.serde", anchor),
        changelog=parse_stream(props, prefix + "changelog", changelog, changelog_system)
        if changelog else None,
        changelog_replication_factor=get_optional_int(
            props, prefix + "changelog.replication.factor", minimum=1
        ),
        changelog_topic_config=_topic_config(props, prefix, own),
        object_cache_size=get_int(props, prefix + "object.cache.size",
                                  DEFAULT_OBJECT_CACHE_SIZE, minimum=0),
        write_batch_size=get_int(props, prefix + "write.batch.size", DEFAULT_WRITE_BATCH_SIZE,
                                 minimum=0),
        object_cache_max_bytes=get_int(props, prefix + "object.cache.max.bytes",
                                       DEFAULT_OBJECT_CACHE_MAX_BYTES, minimum=0),
        properties=own,
        side_inputs=side_inputs,
        side_inputs_processor=processor,
        side_inputs_broadcast=broadcast,
        max_message_size=get_int(props, prefix + "changelog.max.message.size.bytes",
                                 DEFAULT_MAX_MESSAGE_SIZE, minimum=1),
        disallow_large_messages=get_bool(props, prefix + "disallow.large.messages",
                                         DEFAULT_DISALLOW_LARGE),
        drop_large_messages=get_bool(props, prefix + "drop.large.messages", DEFAULT_DROP_LARGE),
        backup_enabled=get_bool(props, prefix + "backup.enabled", DEFAULT_BACKUP_ENABLED),
        bad_records=get_choice(props, prefix + "changelog.bad.records", DEFAULT_BAD_RECORDS,
                               ("fail", "skip")),
    )


def _side_inputs(
    props: Properties, own: Mapping[str, str], prefix: str
) -> tuple[tuple[StreamRef, ...], str | None, bool]:
    """``side.inputs`` (streams, resolved like task.inputs), the processor class and
    ``side.inputs.broadcast``; the processor or broadcast without streams, or streams
    without a processor, is an error at the key that is set."""
    key = prefix + "side.inputs"
    streams = tuple(parse_stream(props, key, item, "kafka")
                    for item in own.get("side.inputs", "").split(",") if item.strip())
    processor = own.get("side.inputs.processor.factory", "").strip() or None
    if streams and processor is None:
        raise error(props, key, f"needs {prefix}side.inputs.processor.factory (a Python class "
                    "with process(message, store), e.g. millpond.sideinputs.KeyValueProcessor)")
    if processor is not None and not streams:
        raise error(props, prefix + "side.inputs.processor.factory",
                    f"is set but {key} names no stream")
    broadcast = get_bool(props, prefix + "side.inputs.broadcast", False)
    if broadcast and not streams:
        raise error(props, prefix + "side.inputs.broadcast", f"is set but {key} names no stream")
    return streams, processor, broadcast


def _topic_config(props: Properties, prefix: str, own: Mapping[str, str]) -> dict[str, str]:
    """``changelog.kafka.*`` plus Samza's ``changelog.min.compaction.lag.ms`` (which, as in
    Samza, must not be given both ways)."""
    config = with_prefix(own, CHANGELOG_TOPIC_PREFIX)
    lag_key = prefix + "changelog." + MIN_COMPACTION_LAG
    if lag_key in props:
        if MIN_COMPACTION_LAG in config:
            raise error(props, lag_key, f"set either this or {prefix}{CHANGELOG_TOPIC_PREFIX}"
                                        f"{MIN_COMPACTION_LAG}, not both")
        get_int(props, lag_key, 0, minimum=0)  # validate
        config[MIN_COMPACTION_LAG] = props[lag_key].strip()
    return config


def _required(props: Properties, own: Mapping[str, str], name: str, sub: str, anchor: str) -> str:
    """``own[sub]`` stripped; a missing or empty value is reported at the store's anchor key."""
    value = own.get(sub, "").strip()
    if not value:
        file, line = where(props, anchor)
        state = "is empty" if sub in own else "is missing"
        key = f"stores.{name}.{sub}"
        raise ConfigError(f"{state}; store {name!r} needs {key}", key=key, file=file, line=line)
    return value


def _warn_if_unknown(props: Properties, prefix: str, sub: str) -> None:
    """Warn about a store key neither millpond nor Samza's table knows (likely a typo).

    A key Samza documents never gets a "did you mean": the ignored ones are logged at INFO
    by the Samza key report (millpond.config.report)."""
    if sub in KNOWN_KEYS or sub.startswith(CHANGELOG_TOPIC_PREFIX):
        return
    if samza_store_key(sub) is not None:
        return
    close = difflib.get_close_matches(sub, KNOWN_KEYS, n=1)
    hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
    warnings.warn(f"{describe(props, prefix + sub)}: unknown store key {prefix + sub!r}{hint}", ConfigWarning,
                  stacklevel=2)

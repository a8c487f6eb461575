"""The ``stores.<name>.*`` settings: engine, serdes, changelog, cache and engine tuning."""

from __future__ import annotations

import difflib
import warnings
from dataclasses import dataclass, field
from typing import Literal

from millpond.config.errors import ConfigError, ConfigWarning
from millpond.config.properties import Properties
from millpond.config.values import (
    StreamRef,
    describe,
    error,
    get_int,
    get_optional_int,
    parse_stream,
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

KNOWN_KEYS = (
    "factory", "key.serde", "msg.serde", "changelog", "changelog.replication.factor",
    "object.cache.size", "write.batch.size", "object.cache.max.bytes", "rocksdb.compression",
    "rocksdb.block.size.bytes", "rocksdb.compaction.style", "rocksdb.bloom.filter.bits.per.key",
    "rocksdb.num.write.buffers", "rocksdb.ttl.ms", "rocksdb.max.log.file.size.bytes",
    "rocksdb.keep.log.file.num", "container.write.buffer.size.bytes",
    "container.cache.size.bytes",
)
CHANGELOG_TOPIC_PREFIX = "changelog.kafka."

# The object cache's bounds per store and task (millpond.stores.cached has the same defaults).
# Samza's defaults are 1000 / 500; millpond's are larger because in Python a cache miss
# (engine get + deserialize) and a write-down (serialize + engine put + changelog record) cost
# far more than a hit, and the dirty bound is what lets a commit interval's repeated writes
# to a key coalesce into one. object.cache.max.bytes bounds the estimated memory (Kafka
# Streams' statestore.cache.max.bytes); 0 for it or object.cache.size turns the cache off.
DEFAULT_OBJECT_CACHE_SIZE = 100_000
DEFAULT_WRITE_BATCH_SIZE = 50_000
DEFAULT_OBJECT_CACHE_MAX_BYTES = 32 * 1024 * 1024


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
    properties: dict[str, str] = field(default_factory=dict)


def parse_stores(
    props: Properties, changelog_system: str, default_changelog: str | None = None
) -> dict[str, StoreConfig]:
    """All configured stores; bare changelog topics go to ``changelog_system``.

    ``default_changelog`` (a format string with ``{store}``), given when
    ``job.changelog.system`` is set, names the changelog of stores that name none.
    """
    parts = (key.split(".", 2) for key in props if key.startswith("stores."))
    names = dict.fromkeys(p[1] for p in parts if len(p) == 3 and p[1] and p[2])
    return {name: _parse_store(props, name, changelog_system, default_changelog)
            for name in names}


def _parse_store(
    props: Properties, name: str, changelog_system: str, default_changelog: str | None
) -> StoreConfig:
    prefix = f"stores.{name}."
    own = with_prefix(props, prefix)
    for sub in own:
        _warn_if_unknown(props, prefix, sub)
    anchor = prefix + "factory" if "factory" in own else prefix + next(iter(own))
    factory = FACTORIES.get(_required(props, own, name, "factory", anchor))
    if factory is None:
        raise error(
            props, prefix + "factory",
            f"unknown store factory {own['factory']!r}; use rocksdb, inmemory or a Samza "
            f"factory class ({', '.join(k for k in FACTORIES if '.' in k)})",
        )
    changelog = own.get("changelog", "").strip()
    if not changelog and default_changelog:
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
        changelog_topic_config=with_prefix(own, CHANGELOG_TOPIC_PREFIX),
        object_cache_size=get_int(props, prefix + "object.cache.size",
                                  DEFAULT_OBJECT_CACHE_SIZE, minimum=0),
        write_batch_size=get_int(props, prefix + "write.batch.size", DEFAULT_WRITE_BATCH_SIZE,
                                 minimum=0),
        object_cache_max_bytes=get_int(props, prefix + "object.cache.max.bytes",
                                       DEFAULT_OBJECT_CACHE_MAX_BYTES, minimum=0),
        properties=own,
    )


def _required(props: Properties, own: dict[str, str], name: str, sub: str, anchor: str) -> str:
    """``own[sub]`` stripped; a missing or empty value is reported at the store's anchor key."""
    value = own.get(sub, "").strip()
    if not value:
        file, line = where(props, anchor)
        state = "is empty" if sub in own else "is missing"
        key = f"stores.{name}.{sub}"
        raise ConfigError(f"{state}; store {name!r} needs {key}", key=key, file=file, line=line)
    return value


def _warn_if_unknown(props: Properties, prefix: str, sub: str) -> None:
    if sub in KNOWN_KEYS or sub.startswith(CHANGELOG_TOPIC_PREFIX):
        return
    close = difflib.get_close_matches(sub, KNOWN_KEYS, n=1)
    hint = f"; did you mean {prefix + close[0]!r}?" if close else ""
    warnings.warn(f"{describe(props, prefix + sub)}: unknown store key {prefix + sub!r}{hint}", ConfigWarning,
                  stacklevel=2)

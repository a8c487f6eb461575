"""The side-input processor API (Samza's ``SideInputsProcessor``) and a ready processor.

A processor turns one side-input record into store entries: ``process(message, store)``
returns an iterable of ``(key, value)`` pairs; the runtime puts each one, deletes the key
when the value is None and ignores a None key (as Samza does). Tombstones (records with a
None value) reach the processor too: it decides what they mean.

``stores.<s>.side.inputs.processor.factory`` names the class (``package.module.Class``,
imported like ``task.class``). It is instantiated with no arguments once per task and
store; if it has ``init(context)``, that is called with a :class:`SideInputsContext`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from millpond.api import IncomingMessageEnvelope
from millpond.config import Config, StoreConfig
from millpond.sideinputs.errors import SideInputsConfigError
from millpond.stores.api import KeyValueStore

Entry = tuple[Any, Any]


@runtime_checkable
class SideInputsProcessor(Protocol):
    """Samza's SideInputsProcessor: one side-input record -> the store entries it makes."""

    def process(
        self, message: IncomingMessageEnvelope, store: KeyValueStore[Any, Any]
    ) -> Iterable[Entry]: ...


@dataclass(frozen=True)
class SideInputsContext:
    """What a processor may want to know: its store, task partition, config and the store's
    key and value serdes (to decode records whose stream has no serdes)."""

    store: str
    partition: int
    config: Config
    key_serde: Any
    msg_serde: Any


class KeyValueProcessor:
    """Stores each record's key and value as they come; a tombstone deletes the key.

    Keys and values the stream's serdes already decoded are stored as they are; raw bytes
    (a stream without serdes) are decoded with the store's own serdes, so a compacted topic
    written with the store's layout becomes the store. Records without a key are skipped.
    """

    def __init__(self) -> None:
        self._key_serde: Any = None
        self._msg_serde: Any = None

    def init(self, context: SideInputsContext) -> None:
        self._key_serde, self._msg_serde = context.key_serde, context.msg_serde

    def process(
        self, message: IncomingMessageEnvelope, store: KeyValueStore[Any, Any]
    ) -> Iterable[Entry]:
        key, value = message.key, message.message
        if key is None:
            return ()
        if isinstance(key, bytes) and self._key_serde is not None:
            key = self._key_serde.from_bytes(key)
        if isinstance(value, bytes) and self._msg_serde is not None:
            value = self._msg_serde.from_bytes(value)
        return ((key, value),)


def load_processor_class(config: Config, store: StoreConfig) -> type:
    """Import the processor class of ``store``; errors name the key's file and line."""
    key = f"stores.{store.name}.side.inputs.processor.factory"
    path = store.side_inputs_processor or ""
    where = config.location(key)
    module_name, _, cls_name = path.rpartition(".")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise SideInputsConfigError(f"{where}: {key}={path} cannot be imported: {exc}") from exc
    if not (isinstance(cls, type) and callable(getattr(cls, "process", None))):
        raise SideInputsConfigError(
            f"{where}: {key}={path} is not a class with process(message, store) "
            "(Samza's SideInputsProcessor; e.g. millpond.sideinputs.KeyValueProcessor)")
    return cls


def new_processor(cls: type, context: SideInputsContext) -> SideInputsProcessor:
    """An instance of ``cls`` for one task's store, initialised with ``context``."""
    processor = cls()
    init = getattr(processor, "init", None)
    if callable(init):
        init(context)
    return processor

"""Job configuration: Java ``.properties`` files with Samza's keys, as typed, located views."""

from millpond.config.backup import BackupConfig
from millpond.config.errors import ConfigError, ConfigWarning
from millpond.config.job import PROCESSING_GUARANTEES, JobConfig
from millpond.config.loader import Config
from millpond.config.properties import Properties, load_properties, parse_properties
from millpond.config.serdes import BUILTIN_SERDES, SerdeSpec
from millpond.config.stores import StoreConfig
from millpond.config.systems import StreamConfig, SystemConfig
from millpond.config.values import StreamRef

__all__ = [
    "BUILTIN_SERDES",
    "BackupConfig",
    "PROCESSING_GUARANTEES",
    "Config",
    "ConfigError",
    "ConfigWarning",
    "JobConfig",
    "Properties",
    "SerdeSpec",
    "StoreConfig",
    "StreamConfig",
    "StreamRef",
    "SystemConfig",
    "load_properties",
    "parse_properties",
]

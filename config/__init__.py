"""mqbridge configuration (TOML contract v1): typed models, validated once at load.

    cfg = load_config("bridge.toml")          # raises mqbridge.errors.ConfigError, one line
    cfg.types["orders"].bulk_size             # bytes (int); durations are seconds (float)

Relative paths in the file are kept as written; `cfg.resolve_path(p)` takes them from the file's
directory (`cfg.base_dir`). Secrets are `pydantic.SecretStr`: call `.get_secret_value()`.
"""

from __future__ import annotations

from mqbridge.config.base import parse_duration, parse_size
from mqbridge.config.collector import CollectorSection
from mqbridge.config.exposure import plaintext_notes
from mqbridge.config.listener import (
    DEFAULT_BACKOUT_THRESHOLD,
    DEFAULT_HALT_AFTER_FAILURES,
    ListenerConfig,
    PreprocessorRef,
)
from mqbridge.config.listener_rules import ids_per_delivery, per_delivery_note
from mqbridge.config.loader import key_path, load_config, parse_config
from mqbridge.config.monitoring import MonitoringSection
from mqbridge.config.plaintext import is_loopback
from mqbridge.config.schema import (
    DEFAULT_PLUGIN_DIRS,
    BridgeConfig,
    BridgeSection,
    LedgerSection,
    LoggingSection,
    PurgeSection,
    SparkSection,
    TypeConfig,
    shown_remote,
)
from mqbridge.config.sources import MemorySourceConfig, MqSourceConfig, SourceConfig, StompSourceConfig
from mqbridge.errors import KeyedError

__all__ = [
    "DEFAULT_BACKOUT_THRESHOLD",
    "DEFAULT_HALT_AFTER_FAILURES",
    "DEFAULT_PLUGIN_DIRS",
    "BridgeConfig",
    "BridgeSection",
    "CollectorSection",
    "KeyedError",
    "LedgerSection",
    "ListenerConfig",
    "LoggingSection",
    "MemorySourceConfig",
    "MonitoringSection",
    "MqSourceConfig",
    "PreprocessorRef",
    "PurgeSection",
    "SourceConfig",
    "SparkSection",
    "StompSourceConfig",
    "TypeConfig",
    "shown_remote",
    "ids_per_delivery",
    "is_loopback",
    "key_path",
    "load_config",
    "parse_config",
    "parse_duration",
    "parse_size",
    "per_delivery_note",
    "plaintext_notes",
]

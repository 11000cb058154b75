"""Configuration texts and parsing helpers shared by the configuration tests."""

from __future__ import annotations

import pytest

from mqbridge.config import BridgeConfig, parse_config
from mqbridge.errors import ConfigError

TYPES = """
[types.orders]
bulk_size = "5MB"
"""
SOURCE = """
[sources.amq]
kind = "stomp"
"""
LISTENER = """
[[listeners]]
source = "amq"
queue = "/queue/orders"
message_type = "orders"
backout_queue = "/queue/orders.backout"
"""
MINIMAL = TYPES + SOURCE + LISTENER


def parse(text: str, env: dict[str, str] | None = None) -> BridgeConfig:
    return parse_config(text, "demo.toml", env=env or {})


def error(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, env)
    message = str(info.value)
    assert "\n" not in message
    return message

"""Which listener `mqbridge redrive --listener NAME` means, and the kinds that re-drive."""

from __future__ import annotations

import pytest

from mqbridge.config import parse_config
from mqbridge.drivers import redrive_of
from mqbridge.errors import ConfigError
from mqbridge.resend.redrive import find_listener

TOML = """
[sources.a]
kind = "stomp"
[sources.b]
kind = "stomp"
port = 61623
[types.t]
[[listeners]]
source = "a"
queue = "/queue/shared"
message_type = "t"
backout_queue = "/queue/shared.backout"
[[listeners]]
source = "b"
queue = "/queue/shared"
message_type = "t"
backout_queue = "/queue/shared.backout"
[[listeners]]
source = "a"
queue = "/queue/only"
message_type = "t"
backout_queue = "/queue/only.backout"
"""


def test_a_listener_by_queue_or_source_and_queue() -> None:
    cfg = parse_config(TOML)
    assert find_listener(cfg.listeners, "/queue/only").backout_queue == "/queue/only.backout"
    assert find_listener(cfg.listeners, "b:/queue/shared").source == "b"
    with pytest.raises(ConfigError, match="two sources read this queue.*a:/queue/shared, b:/queue/shared"):
        find_listener(cfg.listeners, "/queue/shared")
    with pytest.raises(ConfigError, match="no listener reads this queue"):
        find_listener(cfg.listeners, "/queue/nope")


def test_a_kind_without_redrive_says_so() -> None:
    with pytest.raises(ConfigError, match="memory source has no backout queue to re-drive"):
        redrive_of("memory")
    assert callable(redrive_of("stomp"))

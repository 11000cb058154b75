"""Helpers for tests of the IBM MQ source against the fake queue manager."""

from __future__ import annotations

import time
import uuid
from typing import Any

from mqbridge.config import ListenerConfig, MqSourceConfig
from mqbridge.listeners.mq import MqSource
from tests.support.configs import fake_mq_source
from tests.support.fakes import pymqi_fake
from tests.support.fakes.mq_server import FakeQueueManagerServer

DLQ = "SYSTEM.DEAD.LETTER.QUEUE"


def source_config(server: FakeQueueManagerServer, **overrides: Any) -> MqSourceConfig:
    """An `[sources.X]` block of kind "mq" for `server` (validated, like the loader does)."""
    fields: dict[str, Any] = {**fake_mq_source(server.name), "reconnect": "as_def"}
    fields.update(overrides)
    return MqSourceConfig(**fields)


def listener_config(queue: str, **overrides: Any) -> ListenerConfig:
    """A `[[listeners]]` entry; only the keys given count as configured (like TOML keys)."""
    fields: dict[str, Any] = {"source": "qm", "queue": queue, "batch": 50, "wait": 0.2, "message_type": "orders"}
    fields.update(overrides)
    return ListenerConfig(**{k: v for k, v in fields.items() if v is not None})


def make_source(server: FakeQueueManagerServer, queue: str, *, config: dict[str, Any] | None = None,
                **listener: Any) -> MqSource:
    return MqSource("qm", source_config(server, **(config or {})), queue,
                    listener=listener_config(queue, **listener), driver=pymqi_fake)


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:8].upper()}"


def receive_n(source: MqSource, n: int, timeout: float = 5.0) -> list[Any]:
    """Exactly `n` messages of one unit of work, failing if they do not come within `timeout`."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"received {len(got)} of {n} messages")
        message = source.receive(0.2)
        if message is not None:
            got.append(message)
    return got


def make_topic_source(server: FakeQueueManagerServer, topic: str, subscription: str, **listener: Any) -> MqSource:
    """An MQ source of a topic listener (`topic` + `subscription`), named TOPIC@SUBSCRIPTION."""
    config = listener_config("", topic=topic, subscription=subscription, **listener)
    return MqSource("qm", source_config(server), config.queue, listener=config, driver=pymqi_fake)

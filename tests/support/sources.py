"""Helpers for any `Source`: receive what arrives, with deadlines instead of sleeps."""

from __future__ import annotations

import time

from mqbridge.message import Message
from mqbridge.source import Source


def receive_up_to(source: Source, n: int, timeout: float = 10.0) -> list[Message]:
    """At most `n` messages, whatever came within `timeout` seconds."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        message = source.receive(0.2)
        if message is not None:
            got.append(message)
    return got


def receive(source: Source, n: int, timeout: float = 10.0) -> list[Message]:
    got = receive_up_to(source, n, timeout)
    assert len(got) == n, f"received {len(got)} of {n} messages"
    return got

"""How the STOMP adapter reads a MESSAGE frame's headers (no broker: the frames are built here).

A header a broker parses as a number (priority, expires, timestamp...) that does not parse, a
timestamp past year 9999, or a body over `max_message_size` refuses the message at the edge: it
never reaches the listener loop and its move carries the bad values under other names (so the
broker does not refuse the move over them). ActiveMQ and RabbitMQ refuse a bad `priority` on SEND
(measured), so only a frame built here can carry one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mqbridge.config import StompSourceConfig
from mqbridge.listeners.stomp import StompSource
from mqbridge.records import DeliveryTracker


def frame(body: bytes = b"body", **headers: str) -> Any:
    return SimpleNamespace(headers={"message-id": "ID:1", "destination": "/queue/q", "subscription": "s",
                                    "ack": "a1", **headers}, body=body)


def adapter(**settings: Any) -> StompSource:
    return StompSource("amq", StompSourceConfig(**settings), "/queue/q", prefetch=1, tracker=DeliveryTracker())


@pytest.mark.parametrize(("headers", "reason"), [
    ({"priority": "high"}, "header priority: 'high' is not a number"),
    ({"priority": "12"}, "header priority: 12 is not 0-9"),
    ({"expires": "tomorrow"}, "header expires: 'tomorrow' is not a number"),
    ({"timestamp": "99999999999999999999"},
     "header timestamp: 99999999999999999999 ms is not a time this bridge can store (past year 9999)"),
    ({"timestamp": "1.5e12"}, "header timestamp: '1.5e12' is not a number"),
])
def test_a_header_that_does_not_parse_refuses_the_message(headers: dict[str, str], reason: str) -> None:
    message, problem = adapter()._to_message(frame(**headers))  # noqa: SLF001
    assert problem == f"refused at the source: {reason}"
    # the bad values travel under other names, never under the names the broker parses
    (name, value), = headers.items()
    assert message.headers[f"mqbridge-unparseable-{name}"] == value
    assert name not in message.headers


def test_good_headers_pass_and_a_body_over_max_message_size_is_refused() -> None:
    message, problem = adapter()._to_message(frame(priority="4", expires="0", timestamp="1700000000000"))  # noqa: SLF001
    assert problem is None and message.put_timestamp is not None and message.headers["priority"] == "4"
    _, problem = adapter(max_message_size=3)._to_message(frame(b"four"))  # noqa: SLF001
    assert problem == "refused at the source: body of 4 bytes is over max_message_size (3 bytes)"
    _, problem = adapter(max_message_size=4)._to_message(frame(b"four"))  # noqa: SLF001
    assert problem is None

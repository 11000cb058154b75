"""The `timestamp` header each broker hands over, and what the bridge makes of it, on the real brokers.

Broker facts, with a bare STOMP client: RabbitMQ passes a producer's `timestamp` on as sent (a
producer's seconds arrive as seconds; an AMQP producer's timestamp property is seconds by the AMQP
spec) and adds none of its own; ActiveMQ stamps each message in milliseconds. Then the bug they
caused, end to end: RabbitMQ messages whose timestamp is seconds had been read as milliseconds,
landed in put_date=1970-01-21, and the first purge of `retention = "30d"` dropped them all.
"""

from __future__ import annotations

import queue as queues
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import stomp

from mqbridge.put_time import ORIGINAL_HEADER, REFUSED_HEADER
from tests.support.bridge import read_table
from tests.support.exactly_once import RABBIT_SOURCE, Rabbit
from tests.support.processes import mqbridge, run_until_idle, stomp_bridge

pytestmark = pytest.mark.integration


class _Messages(stomp.ConnectionListener):  # type: ignore[misc]  # stomp.py is untyped
    def __init__(self) -> None:
        self.frames: queues.Queue[Any] = queues.Queue()

    def on_message(self, frame: Any) -> None:
        self.frames.put(frame)


def round_trip(address: tuple[str, int], headers: dict[str, str], *,
               login: tuple[str | None, str | None] = (None, None), vhost: str | None = None) -> dict[str, str]:
    """SEND one message with `headers` to a fresh queue and return the headers of its MESSAGE."""
    conn = stomp.Connection12([address], auto_decode=False, vhost=vhost or address[0])
    messages = _Messages()
    conn.set_listener("test", messages)
    conn.connect(*login, wait=True)
    try:
        destination = f"/queue/test.timestamp.{uuid.uuid4().hex[:8]}"
        conn.subscribe(destination, id="1", ack="auto")
        conn.send(destination, b"x", headers=headers)
        try:
            frame = messages.frames.get(timeout=10)
        except queues.Empty:
            raise AssertionError(f"no MESSAGE from {address} within 10 s for the one sent to {destination}") from None
        return dict(frame.headers)
    finally:
        conn.disconnect()


def test_rabbitmq_hands_a_producers_timestamp_in_seconds_over_as_sent_and_adds_none(
        rabbitmq: tuple[str, int]) -> None:
    def rabbit(headers: dict[str, str]) -> dict[str, str]:
        return round_trip(rabbitmq, headers, login=("guest", "guest"), vhost="/")

    now = int(time.time())
    assert rabbit({"timestamp": str(now)})["timestamp"] == str(now)  # seconds stay seconds
    assert rabbit({"timestamp": str(now * 1000)})["timestamp"] == str(now * 1000)  # and milliseconds stay
    assert "timestamp" not in rabbit({})


def test_activemq_stamps_a_message_in_milliseconds_and_keeps_a_producers_own(activemq: tuple[str, int]) -> None:
    before = int(time.time() * 1000)
    stamped = int(round_trip(activemq, {})["timestamp"])
    assert before <= stamped <= int(time.time() * 1000)
    now = int(time.time())
    assert round_trip(activemq, {"timestamp": str(now)})["timestamp"] == str(now)


def test_seconds_timestamps_land_today_and_a_30_day_retention_keeps_every_row(
        tmp_path: Path, spark: Any, rabbitmq: tuple[str, int]) -> None:
    # Given 200 messages on RabbitMQ whose timestamp is seconds (put now), 3 from a producer whose
    # clock is in 2100 and 3 from one whose clock was never set (1999, milliseconds)
    rabbit = Rabbit(rabbitmq)
    destination = f"/queue/test.put-time.{uuid.uuid4().hex[:8]}"
    now = int(time.time())
    sent = [(f"s{i:03d}".encode(), {"timestamp": str(now)}) for i in range(200)]
    sent += [(f"ahead{i}".encode(), {"timestamp": "4102444800"}) for i in range(3)]
    sent += [(f"unset{i}".encode(), {"timestamp": "915148800000"}) for i in range(3)]
    rabbit.put(destination, sent)
    config = (stomp_bridge(destination, port=rabbitmq[1], broker="rabbitmq", extra_source=RABBIT_SOURCE,
                           threads=2, batch=50)
              .set("types.orders", retention="30d").write(tmp_path / "bridge.toml"))
    day_before = datetime.now(timezone.utc).date()

    # When the bridge lands them, and then the retention purge runs
    out = run_until_idle(config)
    purge = mqbridge("purge", "--config", str(config))
    purged, _ = purge.communicate(timeout=180)
    assert purge.returncode == 0, purged

    # Then every row is still there, in today's container, the seconds read as the second they were put
    rows = {bytes(r.body): r for r in read_table(spark, tmp_path / "landing" / "orders")}
    assert sorted(rows) == sorted(body for body, _ in sent), out[-3000:]
    today = {day_before.isoformat(), datetime.now(timezone.utc).date().isoformat()}  # a run across midnight
    assert {str(r.put_date) for r in rows.values()} <= today, purged
    put = datetime.fromtimestamp(now, tz=timezone.utc).replace(tzinfo=None)  # Spark gives naive UTC here
    assert {r.put_timestamp for b, r in rows.items() if b.startswith(b"s")} == {put}
    # and the 6 whose time no message can have been put at took the time they were received, saying why
    refused = {b: r for b, r in rows.items() if not b.startswith(b"s")}
    for body, row in refused.items():
        headers = dict(row.headers)
        assert row.put_timestamp == row.received_timestamp, body
        assert REFUSED_HEADER in headers and ORIGINAL_HEADER in headers, headers
        if body.startswith(b"unset"):
            assert headers[ORIGINAL_HEADER] == "1999-01-01T00:00:00+00:00", headers
    # logged once for the listener, not once per message
    assert out.count("put time no row may have") == 1, out[-3000:]
    assert rabbit.depth(destination) == 0

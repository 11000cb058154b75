"""The STOMP adapter's `timestamp` header and RabbitMQ's `head_message_timestamp`, read by one rule
(`mqbridge.put_time.from_epoch`): RabbitMQ hands over seconds (tests/integration/test_put_time_rabbitmq.py
measures it), ActiveMQ milliseconds, and a number is read in the unit that makes it a plausible put
time. Frames are built here (no broker)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from mqbridge.config import StompSourceConfig
from mqbridge.listeners.stomp import StompSource
from mqbridge.listeners.stomp.frames import put_time
from mqbridge.listeners.stomp.management import head_age
from mqbridge.message import utcnow
from mqbridge.records import DeliveryTracker


def frame(**headers: str) -> Any:
    return SimpleNamespace(headers={"message-id": "ID:1", "destination": "/queue/q", "subscription": "s",
                                    "ack": "a1", **headers}, body=b"body")


def to_message(broker: str, **headers: str) -> Any:
    source = StompSource("amq", StompSourceConfig(broker=broker), "/queue/q", prefetch=1, tracker=DeliveryTracker())
    message, problem = source._to_message(frame(**headers))  # noqa: SLF001
    assert problem is None
    return message


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"])
def test_a_timestamp_in_seconds_or_milliseconds_is_the_time_it_was_put(broker: str) -> None:
    # Given a message put an hour ago, its timestamp in seconds (RabbitMQ) and in milliseconds (ActiveMQ)
    put = (utcnow() - timedelta(hours=1)).replace(microsecond=0)
    for stamp in (int(put.timestamp()), int(put.timestamp()) * 1000):
        # Then the adapter reads both as the time it was put, not 1970 nor year 56,000
        assert to_message(broker, timestamp=str(stamp)).put_timestamp == put


def test_the_unit_given_comes_first_and_the_bridges_own_header_is_milliseconds() -> None:
    # A value plausible in neither unit is read in the unit given (the listener loop then refuses it)
    problems: list[str] = []
    assert put_time({"timestamp": "4102444800"}, "timestamp", problems, unit="s") == datetime(
        2100, 1, 1, tzinfo=timezone.utc)
    assert put_time({"timestamp": "4102444800000"}, "timestamp", problems, unit="ms") == datetime(
        2100, 1, 1, tzinfo=timezone.utc)
    # a copy this adapter put back carries the put time in milliseconds, whatever the broker
    copy = to_message("rabbitmq", **{"mqbridge-requeue-id": "ID:0", "mqbridge-requeue-timestamp": "1717243200000"})
    assert copy.put_timestamp == datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)
    assert problems == []


def test_the_oldest_message_age_from_the_management_api_reads_the_same_way() -> None:
    # head_message_timestamp is the timestamp property in seconds; a producer may have set milliseconds
    ten_minutes_ago = time.time() - 600
    assert head_age(int(ten_minutes_ago)) == pytest.approx(600, abs=5)
    assert head_age(int(ten_minutes_ago * 1000)) == pytest.approx(600, abs=5)
    # a time no message was put at, or none, is no age
    assert head_age(4102444800) is None and head_age(None) is None and head_age(0) is None


def test_on_rabbitmq_a_timestamp_plausible_in_no_unit_is_read_in_seconds() -> None:
    # a producer's clock in 2100 on RabbitMQ: its seconds, not 1970-02-17 in milliseconds
    assert to_message("rabbitmq", timestamp="4102444800").put_timestamp == datetime(2100, 1, 1, tzinfo=timezone.utc)

"""The put time a landed row may carry (`mqbridge.put_time`): an epoch number read in its broker's
unit (RabbitMQ: seconds; ActiveMQ, Artemis: milliseconds) or in the other one when only that makes
it a plausible time; a time before 2000-01-01 or more than a day after receipt refused, the row then
taking its received time, with the refused time and the reason in its headers, one counter and one
log line per listener."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from mqbridge.counters import Counters
from mqbridge.message import Message
from mqbridge.put_time import (
    ORIGINAL_HEADER,
    REFUSED_COUNTER,
    REFUSED_HEADER,
    Unit,
    from_epoch,
    refusal,
    settle,
    settle_unit,
    timestamp_unit,
)

RECEIVED = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)
SECONDS = 1717243200  # RECEIVED, in seconds of the epoch
MILLIS = SECONDS * 1000


def test_each_broker_has_its_unit() -> None:
    assert timestamp_unit("rabbitmq") == "s"
    assert timestamp_unit("activemq") == timestamp_unit("artemis") == "ms"


@pytest.mark.parametrize(("value", "unit"), [
    (SECONDS, "s"),  # RabbitMQ as it hands the timestamp over
    (MILLIS, "ms"),  # ActiveMQ as it hands it over
    (SECONDS, "ms"),  # seconds where milliseconds are expected: 1970-01-20 otherwise
    (MILLIS, "s"),  # a STOMP producer's milliseconds on RabbitMQ: year 56,000 otherwise
], ids=["seconds-as-seconds", "ms-as-ms", "seconds-where-ms-expected", "ms-where-seconds-expected"])
def test_a_number_is_read_in_the_unit_that_makes_it_a_plausible_put_time(value: int, unit: Unit) -> None:
    assert from_epoch(value, unit, RECEIVED) == RECEIVED


def test_a_number_plausible_in_no_unit_is_returned_as_read_and_refused() -> None:
    # a producer's clock 76 years ahead (seconds, on RabbitMQ): read in seconds, refused as too late
    ahead = from_epoch(4102444800, "s", RECEIVED)
    assert ahead == datetime(2100, 1, 1, tzinfo=timezone.utc)
    assert refusal(ahead, RECEIVED).startswith("2100-01-01T00:00:00+00:00 is more than 1 day after the message")
    # a clock never set (1999, in milliseconds) on RabbitMQ: no year in seconds; read in milliseconds
    never_set = from_epoch(915148800000, "s", RECEIVED)
    assert never_set == datetime(1999, 1, 1, tzinfo=timezone.utc)
    assert refusal(never_set, RECEIVED) == "1999-01-01T00:00:00+00:00 is before 2000-01-01"
    # no time at all in either unit
    assert from_epoch(10**20, "ms", RECEIVED) is None


def test_the_range_is_2000_to_a_day_after_receipt() -> None:
    assert refusal(datetime(2000, 1, 1, tzinfo=timezone.utc), RECEIVED) == ""
    assert refusal(datetime(2000, 1, 1, tzinfo=timezone.utc) - timedelta(microseconds=1), RECEIVED) != ""
    assert refusal(RECEIVED + timedelta(days=1), RECEIVED) == ""
    assert refusal(RECEIVED + timedelta(days=1, seconds=1), RECEIVED) != ""
    assert refusal(RECEIVED - timedelta(days=3650), RECEIVED) == ""  # a message waiting for years is fine


def message(put: datetime | None) -> Message:
    return Message(msg_id="m", body=b"b", source="amq", destination="/queue/q", put_timestamp=put,
                   received_timestamp=RECEIVED, headers={"x": "1"})


def test_a_refused_put_time_leaves_the_received_time_and_says_why_in_the_headers() -> None:
    refused = message(datetime(1970, 1, 20, 20, 40, 43, tzinfo=timezone.utc))
    assert settle(refused) == "1970-01-20T20:40:43+00:00 is before 2000-01-01"
    assert refused.put_timestamp is None  # the row takes received_timestamp, and put_date follows it
    assert refused.headers == {"x": "1", ORIGINAL_HEADER: "1970-01-20T20:40:43+00:00",
                               REFUSED_HEADER: "1970-01-20T20:40:43+00:00 is before 2000-01-01"}
    kept, unknown = message(RECEIVED - timedelta(hours=1)), message(None)
    assert settle(kept) == settle(unknown) == ""
    assert kept.put_timestamp == RECEIVED - timedelta(hours=1) and kept.headers == {"x": "1"}


def test_refusals_are_counted_per_listener_and_logged_once_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    counters = Counters()
    labels = {"listener": "amq:/queue/q", "queue": "/queue/q"}
    future = RECEIVED + timedelta(days=400)
    with caplog.at_level(logging.WARNING, logger="mqbridge.put_time"):
        assert settle_unit([message(future), message(RECEIVED), message(future)], counters, labels) == 2
        assert settle_unit([message(future)], counters, labels) == 1
        assert settle_unit([message(RECEIVED)], counters, labels) == 0
    assert counters.total(REFUSED_COUNTER, listener="amq:/queue/q") == 3
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("amq:/queue/q: 2 message(s) of a unit carry a put time no row may have (2025-07-06")
    assert f"mqbridge_{REFUSED_COUNTER}_total" in line
    # another listener's first refusal is logged too
    with caplog.at_level(logging.WARNING, logger="mqbridge.put_time"):
        settle_unit([message(future)], counters, {"listener": "amq:/queue/other", "queue": "/queue/other"})
    assert len(caplog.records) == 2

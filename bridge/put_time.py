"""When a message was put: the epoch number a broker hands over, read in the right unit, and a put
time no landed row may carry, refused.

A row's `put_timestamp` is its key and chooses its `put_date` container, and a retention purge drops
a container whose rows are all older than the retention. Brokers give the put time as a number of
the epoch in their own unit: ActiveMQ and Artemis in milliseconds, RabbitMQ in seconds (an AMQP
producer's timestamp property; a STOMP producer's `timestamp` header kept as sent, measured on
RabbitMQ 3.10 in tests/integration/test_put_time_rabbitmq.py). A 2026 time in seconds read as
milliseconds is 1970-01-21: its rows landed in `put_date=1970-01-21` and the first purge of
`retention = "30d"` dropped them.

Two rules, decided here and nowhere else:

* Unit. A number is read in its broker's unit (`timestamp_unit`) unless only the other unit makes
  it a plausible put time; then it is read in that one. The two never compete: the plausible
  seconds (about 9.5e8 to 1.8e9 today) and milliseconds (9.5e11 to 1.8e12) are three orders of
  magnitude apart.
* Range. A put time before `EARLIEST` or more than `MAX_AHEAD` after the message was received is
  refused (`settle`): the row keeps its received time as `put_timestamp` (and `put_date` follows
  it), the refused time stays in header `ORIGINAL_HEADER` and the reason in `REFUSED_HEADER`. This
  holds for every source (IBM MQ's PutDate/PutTime are set by whoever puts with
  MQPMO_SET_ALL_CONTEXT, too): the listener loop settles each message it receives
  (`settle_unit`), counts the refusals (`mqbridge_put_timestamps_refused_total`) and logs the first
  of each listener, with its unit's count; the counter tells the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Literal

from mqbridge.counters import Counters
from mqbridge.message import Message

log = logging.getLogger(__name__)

#: A unit of an epoch number: seconds or milliseconds.
Unit = Literal["s", "ms"]
_OTHER: dict[Unit, Unit] = {"s": "ms", "ms": "s"}
_PER_SECOND: dict[Unit, int] = {"s": 1, "ms": 1000}
#: The STOMP dialects (`[sources.X] broker`) whose `timestamp` header is in seconds; the others'
#: (activemq, artemis) is in milliseconds.
_SECONDS_BROKERS = frozenset({"rabbitmq"})

#: No message put before this is believed: older values are clocks that were never set, or numbers
#: read in the wrong unit.
EARLIEST = datetime(2000, 1, 1, tzinfo=timezone.utc)
#: How far after its receipt a put time may lie (clocks of producer and bridge hosts differ a little).
MAX_AHEAD = timedelta(days=1)

#: Header of a row whose put time was refused: why.
REFUSED_HEADER = "mqbridge-put-timestamp-refused"
#: Header of a row whose put time was refused: the refused time (ISO 8601, UTC).
ORIGINAL_HEADER = "mqbridge-original-put-timestamp"
#: The counter of refused put times (Prometheus: mqbridge_put_timestamps_refused_total), by listener.
REFUSED_COUNTER = "put_timestamps_refused"


def timestamp_unit(broker: str) -> Unit:
    """The unit of a STOMP broker's `timestamp` header (`[sources.X] broker`)."""
    return "s" if broker in _SECONDS_BROKERS else "ms"


def refusal(put: datetime, received: datetime) -> str:
    """Why `put` cannot be a message's put time when it was `received`; "" when it can."""
    if put < EARLIEST:
        return f"{put.isoformat()} is before {EARLIEST.date().isoformat()}"
    if put - received > MAX_AHEAD:
        return (f"{put.isoformat()} is more than {_days(MAX_AHEAD)} after the message was received "
                f"({received.isoformat()})")
    return ""


def _days(span: timedelta) -> str:
    days = span / timedelta(days=1)
    return f"{days:g} day" + ("" if days == 1 else "s")


def _reading(value: float, unit: Unit) -> datetime | None:
    """`value` of the epoch in `unit` as a UTC time; None past what a datetime holds (year 9999)."""
    try:
        return datetime.fromtimestamp(value / _PER_SECOND[unit], tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


def from_epoch(value: float, unit: Unit, received: datetime) -> datetime | None:
    """The put time a number of the epoch stands for, for a message `received` then: read in
    `unit`, or in the other unit when only that reading is a plausible put time (`refusal`). A
    value plausible in neither is returned as read in `unit` (in the other if `unit` cannot hold
    it), for `settle` to refuse with its reason; None when no reading is a time at all."""
    first = _reading(value, unit)
    if first is not None and not refusal(first, received):
        return first
    other = _reading(value, _OTHER[unit])
    if other is not None and not refusal(other, received):
        return other
    return first if first is not None else other


def settle(message: Message) -> str:
    """Refuse `message`'s put time if it cannot be one (`refusal`): the row then takes its received
    time, and its headers keep the refused time and the reason. The reason; "" if kept (or none)."""
    put = message.put_timestamp
    if put is None:
        return ""
    reason = refusal(put, message.received_timestamp)
    if reason:
        message.headers[ORIGINAL_HEADER] = put.isoformat()
        message.headers[REFUSED_HEADER] = reason
        message.put_timestamp = None
    return reason


def settle_unit(batch: Sequence[Message], counters: Counters, labels: Mapping[str, str]) -> int:
    """`settle` each message of a unit a listener received; count the refused put times under the
    listener's `labels` and log the listener's first unit that has any (with its count and one
    reason), not every message. How many were refused."""
    reasons = [reason for message in batch if (reason := settle(message))]
    if not reasons:
        return 0
    if counters.inc(REFUSED_COUNTER, len(reasons), **labels) == len(reasons):
        log.warning("%s: %d message(s) of a unit carry a put time no row may have (%s); their rows take the "
                    "time they were received as put_timestamp (and put_date), with the refused time in header "
                    "%s and the reason in %s. Later ones are only counted: mqbridge_%s_total",
                    labels.get("listener", "?"), len(reasons), reasons[0], ORIGINAL_HEADER, REFUSED_HEADER,
                    REFUSED_COUNTER)
    return len(reasons)

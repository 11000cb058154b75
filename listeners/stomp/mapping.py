"""STOMP headers both ways: a MESSAGE frame to a `Message` (which headers are row columns, which
are frame plumbing, which must parse as numbers, else the message is refused at the edge), and a
received message to the headers of the frames the adapter SENDs about it: the copy given back that
keeps its identity (`mqbridge-requeue-*`, cumulative acks on ActiveMQ and Artemis), the move to a
backout queue, the result to its reply-to. Every copy is built from the message as received, not
from what the preprocessors made of it. A move never carries a header the broker refuses on SEND
(`user-id` of another user: RabbitMQ answers ERROR and closes): those travel under
`mqbridge-original-<name>`. `content_key` tells a redelivery on a broker whose message ids are per
delivery (RabbitMQ) by its content."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from mqbridge.listeners.stomp.frames import header_int, one_line, put_time
from mqbridge.message import Message, put_date_of, utcnow
from mqbridge.put_time import Unit as EpochUnit
from mqbridge.records import DeliveryTracker
from mqbridge.source import BackoutMove, Landed

# Headers that become columns of the landed row (or are per-delivery plumbing).
_COLUMN_HEADERS = {"message-id", "destination", "timestamp", "ack", "subscription", "content-length",
                   "redelivered", "correlation-id"}
# Frame plumbing of the SEND that RabbitMQ passes on to the MESSAGE (measured on 3.10: a copy given
# back in a transaction arrives with `transaction`, a producer's `receipt` arrives too): not message
# headers, so they never reach the landed row.
_SEND_FRAME_HEADERS = {"transaction", "receipt"}
# Headers not copied to a backout message: the broker sets them anew on SEND.
_NOT_COPIED = _COLUMN_HEADERS | {"expires", "persistent", "transaction", "receipt", "x-delivery-count"}
# A copy given back to the source queue keeps persistence, expiry and priority.
_NOT_REQUEUED = _COLUMN_HEADERS | {"transaction", "receipt", "x-delivery-count"}
# Headers by which a copy put back by cumulative-ack commit (or `mqbridge redrive`) carries the
# original's identity.
REQUEUE_ID = "mqbridge-requeue-id"
REQUEUE_COUNT = "mqbridge-requeue-delivery-count"
REQUEUE_TIMESTAMP = "mqbridge-requeue-timestamp"
REQUEUE_REASON = "mqbridge-requeue-reason"
# Set only by earlier builds' `identity = "stamp"` on the copies they stamped (whether the original
# was flagged redelivered); such a copy still on a queue is read as the message it stands for.
REQUEUE_REDELIVERED = "mqbridge-requeue-redelivered"
_REQUEUE_HEADERS = {REQUEUE_ID, REQUEUE_COUNT, REQUEUE_TIMESTAMP, REQUEUE_REASON, REQUEUE_REDELIVERED}
# Headers a broker parses as numbers: an unparseable value is moved aside (renamed) on a backout move,
# or the broker would refuse the SEND (ActiveMQ answers a bad `priority` with ERROR and closes).
# Headers that are not a landed row's `headers`: its columns, this adapter's own, frame plumbing (one set:
# every header of every message is looked up in it).
_NOT_ROW_HEADERS = frozenset(_COLUMN_HEADERS | _REQUEUE_HEADERS | _SEND_FRAME_HEADERS)
_NUMERIC_HEADERS = ("timestamp", "priority", "expires", "x-delivery-count", REQUEUE_COUNT, REQUEUE_TIMESTAMP)
_BAD_HEADER_PREFIX = "mqbridge-unparseable-"
# Headers of a message its result keeps (`confirm = "reply-to"`).
_RESULT_KEEPS = ("persistent", "priority", "expires")
# Headers a move does not SEND as they are, kept as `mqbridge-original-<name>` instead: `user-id` (RabbitMQ
# refuses a SEND whose user-id is not the connection's user: ERROR precondition_failed, measured on 3.10) and
# RabbitMQ's `expiration` (a moved message must not expire on the backout queue). The headers RabbitMQ sets
# when it dead-letters a message (`x-first-death-*`; `x-death` is not shown over STOMP) SEND as they are.
_SET_ASIDE_ON_MOVE = ("user-id", "expiration")
ORIGINAL_PREFIX = "mqbridge-original-"
# Headers of a MESSAGE frame that differ between deliveries of one message (RabbitMQ's per delivery).
_PER_DELIVERY = frozenset({"message-id", "ack", "redelivered", "subscription", "content-length", "x-delivery-count",
                           "receipt", "transaction"})


def to_message(frame: Any, *, source: str, destination: str, tracker: DeliveryTracker,
               max_message_size: int | None, earlier_id: str | None = None,
               timestamp_unit: EpochUnit = "ms") -> tuple[Message, str | None]:
    """The message of a MESSAGE frame, and why it must be refused (None: it is fine). The
    delivery is counted in `tracker`; a copy this adapter sent is the message it is a copy of; a
    redelivery of a delivery given back unlanded takes over its id, `earlier_id` (per-delivery ids:
    `DeliveryTracker.earlier_delivery`), and so its count. The broker's `timestamp` is read in
    `timestamp_unit` (`mqbridge.put_time.timestamp_unit`); the bridge's own copies' in ms."""
    h = frame.headers
    requeued = REQUEUE_ID in h
    msg_id = h[REQUEUE_ID] if requeued else earlier_id or h["message-id"]
    problems: list[str] = []
    count, earlier = _deliveries(h, msg_id, tracker, problems)
    put = (put_time(h, REQUEUE_TIMESTAMP, problems) if requeued
           else put_time(h, "timestamp", problems, unit=timestamp_unit))
    priority = header_int(h, "priority", problems)
    if priority is not None and not 0 <= priority <= 9:
        problems.append(f"header priority: {priority} is not 0-9")
    header_int(h, "expires", problems)
    body = frame.body if isinstance(frame.body, bytes) else str(frame.body or "").encode()
    limit = max_message_size
    if limit is not None and len(body) > limit:
        problems.append(f"body of {len(body)} bytes is over max_message_size ({limit} bytes)")
    message = Message(
        msg_id=msg_id,
        body=body,
        source=source,
        destination=h.get("destination", destination),
        correlation_id=h.get("correlation-id"),
        put_timestamp=put,
        received_timestamp=utcnow(),
        redelivered=h.get("redelivered") == "true" or _requeued_redelivery(h, earlier),
        delivery_count=count,
        headers={k: v for k, v in h.items() if k not in _NOT_ROW_HEADERS},
        token=h.get("ack", msg_id),
    )
    if problems:
        for name in _NUMERIC_HEADERS:
            message.headers.pop(name, None)
        message.headers.update(_set_aside(h))
        return message, "refused at the source: " + "; ".join(problems)
    return message, None


def _deliveries(h: dict[str, str], msg_id: str, tracker: DeliveryTracker,
                problems: list[str]) -> tuple[int, int]:
    """This delivery's count (the bridge's, or a copy's if higher) and the deliveries counted before a
    copy this adapter sent (0 for any other message). RabbitMQ's `x-delivery-count` (quorum queues)
    is not read: it counts every disconnect and NACK, a crash or an outage too, which are not failed
    deliveries (it stays in the row's headers)."""
    count = tracker.delivered(msg_id)
    earlier = 0
    if REQUEUE_ID in h:  # a copy given back by an earlier commit (or re-driven): the count survives restarts
        earlier = header_int(h, REQUEUE_COUNT, problems) or 0
        count = max(count, earlier + 1)
        if h.get(REQUEUE_REASON) and tracker.last_reason(msg_id) is None:
            tracker.failed(msg_id, h[REQUEUE_REASON])
    return count, earlier


def _requeued_redelivery(headers: Mapping[str, str], earlier: int) -> bool:
    """Whether a copy this adapter sent is a redelivery: a copy given back always is; a copy stamped
    by an earlier build is when its original was flagged redelivered or had been delivered before."""
    if REQUEUE_ID not in headers:
        return False
    if REQUEUE_REDELIVERED in headers:
        return headers[REQUEUE_REDELIVERED] == "true" or earlier > 0
    return True


def _set_aside(headers: dict[str, str]) -> dict[str, str]:
    """Numeric headers kept under another name, so that moving a message refused at the edge
    does not make the broker refuse the SEND over the same bad value."""
    return {f"{_BAD_HEADER_PREFIX}{k}": headers[k] for k in _NUMERIC_HEADERS if k in headers}


def requeue_headers(message: Message, tracker: DeliveryTracker) -> dict[str, str]:
    """The headers of `message` put back on the source queue as a copy that keeps its identity. The
    count a copy carries leaves out deliveries given back for an outage (they never count)."""
    headers = {k: v for k, v in message.headers.items() if k not in _NOT_REQUEUED}
    counted = message.delivery_count - tracker.outage_give_backs(message.msg_id)
    headers.update({
        REQUEUE_ID: message.msg_id,
        REQUEUE_COUNT: str(max(0, counted)),
        REQUEUE_REASON: one_line(tracker.last_reason(message.msg_id) or ""),
    })
    if message.correlation_id:
        headers["correlation-id"] = message.correlation_id
    if message.put_timestamp is not None:
        headers[REQUEUE_TIMESTAMP] = str(int(message.put_timestamp.timestamp() * 1000))
    return headers


def backout_headers(message: Message, move: BackoutMove) -> dict[str, str]:
    """The headers of `message` moved to its backout queue: persistent, with the reason and
    where it came from; a header the broker could refuse on SEND (or act on) under
    `mqbridge-original-<name>` (`_SET_ASIDE_ON_MOVE`)."""
    headers = {k: v for k, v in message.headers.items() if k not in _NOT_COPIED}
    for name in _SET_ASIDE_ON_MOVE:
        if name in headers:
            headers[f"{ORIGINAL_PREFIX}{name}"] = headers.pop(name)
    headers.update({
        "persistent": "true",  # ActiveMQ SENDs are non-persistent unless asked
        "mqbridge-reason": one_line(move.reason),
        "mqbridge-original-message-id": message.msg_id,
        "mqbridge-original-destination": message.destination,
        "mqbridge-delivery-count": str(message.delivery_count),
        "mqbridge-moved-at": utcnow().isoformat(),
    })
    if message.correlation_id:
        headers["correlation-id"] = message.correlation_id
    if message.put_timestamp is not None:
        headers["mqbridge-original-timestamp"] = str(int(message.put_timestamp.timestamp() * 1000))
    return headers


def content_key(headers: Mapping[str, str], body: bytes) -> str:
    """What a MESSAGE frame (its `headers`, as received, and `body`) holds apart from what changes
    between deliveries (`_PER_DELIVERY`): the same for every delivery of one message, and for
    messages sent with the same body and headers."""
    digest = hashlib.blake2b(body, digest_size=16)
    digest.update(repr(sorted((k, v) for k, v in headers.items() if k not in _PER_DELIVERY)).encode())
    return digest.hexdigest()


def result_of(message: Message, move: BackoutMove | None, done: Landed | None,
              extra: Mapping[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    """The body and headers of the result sent to `message`'s reply-to: it was moved (`move`) or
    landed (`done`). The result's `correlation-id` is the message's id (the JMS request/reply
    rule); the message's own `correlation-id`, if any, comes back as `mqbridge_correlation_id`;
    its `mqbridge_*` headers (and its JSON body) say where it landed or why it was moved, with
    `extra` (a station's result: message_type, source); persistence, priority and expiry are the
    message's own."""
    result: dict[str, str] = {"result": "backout" if move is not None else "landed",
                              "message_id": message.msg_id, "queue": message.destination}
    if message.correlation_id:  # a STOMP producer's own key: it cannot know the message id
        result["correlation_id"] = message.correlation_id
    if move is not None:
        result.update(reason=one_line(move.reason), backout_queue=move.queue or "")
    elif done is not None:
        result.update(table=done.table, bulk_id=done.bulk_id, put_date=put_date_of(message))
    result.update(extra or {})
    headers = {k: message.headers[k] for k in _RESULT_KEEPS if k in message.headers}
    headers.update({f"mqbridge_{key}": value for key, value in result.items()})
    headers.update({"correlation-id": message.msg_id, "content-type": "application/json"})
    return json.dumps(result).encode(), headers

"""The headers of a message re-driven from a backout queue (`mqbridge.listeners.stomp.redrive`): the
copy keeps the identity the adapter turns back into the original message; the reason is history."""

from __future__ import annotations

from mqbridge.listeners.stomp.mapping import REQUEUE_COUNT, REQUEUE_ID, REQUEUE_TIMESTAMP, to_message
from mqbridge.listeners.stomp.redrive import REDRIVEN_REASON, redrive_headers
from mqbridge.records import DeliveryTracker


class _Frame:
    def __init__(self, headers: dict[str, str], body: bytes) -> None:
        self.headers = headers
        self.body = body


MOVED = {"message-id": "ID:backout-7", "destination": "/queue/q.backout", "timestamp": "1700000009999",
         "ack": "ack-1", "subscription": "sub-1", "persistent": "true", "x-app": "shop", "correlation-id": "c-1",
         "mqbridge-reason": "backout threshold is 3:\nfailed on its own", "mqbridge-original-message-id": "ID:orig-1",
         "mqbridge-original-destination": "/queue/q", "mqbridge-delivery-count": "3",
         "mqbridge-moved-at": "2026-01-01T00:00:00+00:00", "mqbridge-original-timestamp": "1700000000123"}


def test_the_copy_is_the_original_message_to_the_adapter() -> None:
    headers, identity = redrive_headers(dict(MOVED))
    assert identity
    assert headers[REQUEUE_ID] == "ID:orig-1" and headers[REQUEUE_COUNT] == "0"
    assert headers[REQUEUE_TIMESTAMP] == "1700000000123" and headers["persistent"] == "true"
    assert not {"message-id", "ack", "subscription", "timestamp", "mqbridge-reason"} & set(headers)
    # As the adapter reads it from the source queue: the original id, put time, headers; a first delivery
    delivered = dict(headers, **{"message-id": "ID:new-9", "destination": "/queue/q", "timestamp": "1800000000000",
                                 "ack": "ack-9", "subscription": "sub-2"})
    message, problem = to_message(_Frame(delivered, b"\xff body"), source="amq", destination="/queue/q",
                                  tracker=DeliveryTracker(), max_message_size=None)
    assert problem is None
    assert message.msg_id == "ID:orig-1" and message.delivery_count == 1
    assert message.put_timestamp is not None and int(message.put_timestamp.timestamp() * 1000) == 1700000000123
    assert message.correlation_id == "c-1" and message.headers["x-app"] == "shop"
    assert message.headers[REDRIVEN_REASON] == "backout threshold is 3: failed on its own"


def test_the_reason_of_every_redrive_is_kept() -> None:
    first, _ = redrive_headers(dict(MOVED))
    moved_again = dict(first, **{"mqbridge-reason": "bad again", "mqbridge-original-message-id": "ID:orig-1"})
    second, _ = redrive_headers(moved_again)
    assert second[REDRIVEN_REASON] == "bad again | backout threshold is 3: failed on its own"


def test_a_message_the_bridge_did_not_move_goes_back_as_a_new_message() -> None:
    headers, identity = redrive_headers({"message-id": "ID:x", "destination": "/queue/q.backout", "x-app": "a"})
    assert not identity and REQUEUE_ID not in headers and headers["x-app"] == "a"

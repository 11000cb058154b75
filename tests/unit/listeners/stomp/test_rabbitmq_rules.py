"""The STOMP adapter's RabbitMQ rules without a broker (frames built here; the broker's side is in
tests/contract/test_rabbitmq.py and tests/integration/test_rabbitmq_counts.py).

RabbitMQ's message-id is per delivery, so a redelivery of what a commit gave back unlanded is known by
its content and takes over the earlier delivery's id and count; any other redelivery may have landed
(a possible duplicate). `x-delivery-count` counts nothing the bridge means to count. A move sets the
producer's `user-id` (which RabbitMQ refuses on another user's SEND) and `expiration` aside. A unit
with cumulative acks is settled in runs, never with copies."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mqbridge.config import StompSourceConfig
from mqbridge.errors import BackoutFailedError, SourceConnectionError
from mqbridge.listeners.stomp import StompSource
from mqbridge.listeners.stomp.commit import DROPS_BEFORE_REFUSED, CommitPlan, Transaction
from mqbridge.listeners.stomp.mapping import backout_headers, content_key
from mqbridge.listeners.stomp.unit import Unit
from mqbridge.message import Message
from mqbridge.records import DeliveryTracker, InDoubtLog
from mqbridge.source import BackoutMove


def frame(n: int, body: bytes = b"body", redelivered: bool = False, **headers: str) -> Any:
    return SimpleNamespace(body=body, headers={
        "message-id": f"T_s@@session-{n}@@1", "ack": f"T_s@@session-{n}@@1", "destination": "/queue/q",
        "subscription": "s", "redelivered": "true" if redelivered else "false", "persistent": "true", **headers})


def rabbit(tracker: DeliveryTracker, broker: str = "rabbitmq") -> StompSource:
    return StompSource("amq", StompSourceConfig(broker=broker), "/queue/q", prefetch=10, tracker=tracker)


def test_the_content_key_leaves_out_what_changes_between_deliveries() -> None:
    first = frame(1, **{"x-app": "shop"}).headers
    again = frame(2, redelivered=True, **{"x-app": "shop", "x-delivery-count": "3"}).headers
    assert content_key(first, b"a") == content_key(again, b"a")
    assert content_key(first, b"a") != content_key(first, b"b")
    assert content_key(first, b"a") != content_key({**first, "x-app": "other"}, b"a")


def test_a_redelivery_of_what_was_given_back_unlanded_keeps_its_id_and_count() -> None:
    # Given a message received once and given back unlanded (its count noted)
    tracker = DeliveryTracker()
    source = rabbit(tracker)
    first, problem = source._to_message(frame(1))  # noqa: SLF001
    assert problem is None and first.delivery_count == 1
    tracker.gave_back_unlanded([(content_key(frame(1).headers, b"body"), first.msg_id)])
    # When RabbitMQ redelivers it under a new message-id (quorum: with its own count)
    again, _ = source._to_message(frame(2, redelivered=True, **{"x-delivery-count": "7"}))  # noqa: SLF001
    # Then it has the first delivery's id, the bridge's count (not RabbitMQ's), and is no possible duplicate
    assert (again.msg_id, again.delivery_count, again.redelivered) == (first.msg_id, 2, True)
    assert again.headers["x-delivery-count"] == "7"  # kept for the row
    assert again.msg_id not in source._unit.doubtful  # noqa: SLF001
    # and the taken id is not handed out twice: an identical redelivery is new, and may have landed
    twin, _ = source._to_message(frame(3, redelivered=True))  # noqa: SLF001
    assert (twin.msg_id, twin.delivery_count) == ("T_s@@session-3@@1", 1)
    assert twin.msg_id in source._unit.doubtful  # noqa: SLF001


def test_only_rabbitmq_redeliveries_are_doubtful() -> None:
    source = rabbit(DeliveryTracker(), broker="activemq")
    message, _ = source._to_message(frame(1, redelivered=True))  # noqa: SLF001
    assert message.redelivered and source._unit.doubtful == set()  # noqa: SLF001
    assert source._unit.received == {}  # noqa: SLF001


def test_a_move_sets_the_producers_user_id_and_expiration_aside() -> None:
    message = Message(msg_id="m1", body=b"x", source="amq", destination="/queue/q",
                      headers={"user-id": "producer", "expiration": "60000", "x-app": "shop", "persistent": "true"})
    headers = backout_headers(message, BackoutMove(message, "bad", "/queue/q.backout"))
    assert "user-id" not in headers and "expiration" not in headers
    assert headers["mqbridge-original-user-id"] == "producer"
    assert headers["mqbridge-original-expiration"] == "60000"
    assert headers["x-app"] == "shop" and headers["persistent"] == "true"


def test_a_unit_is_settled_in_runs_of_removed_and_given_back_messages() -> None:
    messages = [Message(msg_id=f"m{i}", body=b"x", source="amq", destination="/queue/q") for i in range(6)]
    plan = CommitPlan.of(Unit(messages=messages), moves=[], returns=[messages[2], messages[3], messages[5]])
    assert [(removed, m.msg_id) for removed, m in plan.runs()] == [(True, "m1"), (False, "m3"), (True, "m4"),
                                                                 (False, "m5")]


class DroppingConnection:
    """A connection that the broker closes, without a reason, on every SEND (a full queue on RabbitMQ)."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(broker="rabbitmq")
        self.destination, self.name, self.receipt_timeout = "/queue/q", "amq", 1.0
        self.frames = SimpleNamespace(errors=[], disconnected=SimpleNamespace(is_set=lambda: True),
                                      await_receipts=lambda receipts, before, timeout: "the connection dropped",
                                      refused=lambda sends, before: None)
        self.failures = 0

    def send(self, destination: str, body: bytes, headers: dict[str, str], tx: str | None, what: str) -> str:
        return f"receipt-{destination}"

    def fail(self, reason: str, error: type[Exception] = SourceConnectionError, msg_ids: Any = None) -> None:
        self.failures += 1
        raise error(reason)


def test_a_move_whose_send_drops_the_connection_every_time_is_taken_for_refused() -> None:
    # Given a move that RabbitMQ answers by closing the connection (no ERROR frame), each time it is tried
    tracker = DeliveryTracker()
    message = Message(msg_id="m1", body=b"x", source="amq", destination="/queue/q")
    plan = CommitPlan.of(Unit(messages=[message]), moves=[BackoutMove(message, "bad", "/queue/q.backout")],
                         returns=[])
    errors: list[type[Exception]] = []
    for _ in range(DROPS_BEFORE_REFUSED):
        connection: Any = DroppingConnection()
        tx = Transaction(connection, None, InDoubtLog(), tracker, content_key=lambda m: m.body.hex())
        tx.send_moves(plan, [message])
        with pytest.raises((SourceConnectionError, BackoutFailedError)) as info:
            tx.finish([message], [message])
        errors.append(info.type)
    # Then the first drops look like outages (retried), the last halts the listener with the reason
    assert errors == [SourceConnectionError] * (DROPS_BEFORE_REFUSED - 1) + [BackoutFailedError]

"""Which results a STOMP commit sends to stations (`[types.X] results_to`): each landed or moved
message of a type with a station, in the commit's transaction; none outside a transaction (receipted:
counted as failed) but on RabbitMQ (no transaction there: confirmed before the ACK), none for a
message given back. The broker's side is tested on ActiveMQ
(tests/integration/test_results_to.py)."""

from __future__ import annotations

import json
from typing import Any

from mqbridge.listeners.stomp.commit import CommitPlan, Transaction
from mqbridge.listeners.stomp.unit import Unit
from mqbridge.message import Message
from mqbridge.outbound.stations import Stations
from mqbridge.records import DeliveryTracker, InDoubtLog
from mqbridge.source import BackoutMove, Confirmations, Landed
from tests.unit.listeners.stomp.stubs import StubConnection


class RecordingConnection(StubConnection):
    """A StubConnection that also keeps what each SEND carried."""

    name = "amq"

    def __init__(self) -> None:
        super().__init__()
        self.frames_sent: list[tuple[str, bytes, dict[str, str], str | None]] = []

    def send(self, destination: str, body: bytes, headers: dict[str, str], tx: str | None, what: str) -> str:
        self.frames_sent.append((destination, body, dict(headers), tx))
        return super().send(destination, body, headers, tx, what)


def message(n: int, message_type: str = "") -> Message:
    return Message(msg_id=f"m{n}", body=b"x", source="amq", destination="/queue/in", message_type=message_type,
                   headers={"persistent": "false", "priority": "4"})


def commit(tx: str | None, landed: list[Landed], moves: list[BackoutMove], returns: list[Message],
           messages: list[Message], broker: str = "activemq") -> tuple[Confirmations, RecordingConnection]:
    connection = RecordingConnection()
    connection.config.broker = broker
    connection_any: Any = connection
    stations = Stations({"orders": "/queue/audit", "bad": "AUDIT.Q"}, default_type="orders", listener="amq:/queue/in")
    confirmed = Confirmations()
    plan = CommitPlan.of(Unit(messages=messages), moves=moves, returns=returns)
    Transaction(connection_any, tx, InDoubtLog(), DeliveryTracker()).send_station_results(
        plan, landed, confirmed, stations, messages)
    return confirmed, connection


def test_landed_and_moved_results_of_routed_types_are_sent_in_the_transaction() -> None:
    m1, m2, m3, m4, m5 = message(1, "orders"), message(2, "invoices"), message(3), message(4), message(5, "orders")
    landed = [Landed(m1, "orders", "orders-1a2b3c4d-00000001"), Landed(m2, "invoices", "invoices-1a2b3c4d-00000002"),
              Landed(m3, "orders", "orders-1a2b3c4d-00000003")]
    confirmed, connection = commit("tx-1", landed, [BackoutMove(m4, "too big", "/queue/in.backout")], [m5],
                                   [m1, m2, m3, m4, m5])
    # m2 is of a type without a station; m5 was given back (no final result yet)
    assert [(d, tx) for d, _, _, tx in connection.frames_sent] == [("/queue/audit", "tx-1")] * 3
    bodies = [json.loads(body) for _, body, _, _ in connection.frames_sent]
    assert [(b["message_id"], b["result"], b["message_type"]) for b in bodies] == [
        ("m1", "landed", "orders"), ("m3", "landed", "orders"), ("m4", "backout", "orders")]
    assert bodies[2]["reason"] == "too big" and bodies[2]["backout_queue"] == "/queue/in.backout"
    headers = connection.frames_sent[0][2]
    assert headers["persistent"] == "true" and headers["priority"] == "4" and headers["correlation-id"] == "m1"
    assert headers["mqbridge_source"] == "amq" and headers["mqbridge_bulk_id"] == "orders-1a2b3c4d-00000001"
    assert (confirmed.to_stations, confirmed.failed) == (3, 0)


def test_outside_a_transaction_or_to_a_queue_name_nothing_is_sent_and_it_is_counted() -> None:
    m1, m2 = message(1, "orders"), message(2, "bad")
    landed = [Landed(m1, "orders", "orders-1a2b3c4d-00000001"), Landed(m2, "bad", "bad-1a2b3c4d-00000002")]
    confirmed, connection = commit(None, landed, [], [], [m1, m2])
    assert connection.frames_sent == [] and (confirmed.to_stations, confirmed.failed) == (0, 2)
    confirmed, connection = commit("tx-2", landed, [], [], [m1, m2])
    assert [d for d, *_ in connection.frames_sent] == ["/queue/audit"] and confirmed.failed == 1


def test_on_rabbitmq_results_are_sent_without_a_transaction() -> None:
    # RabbitMQ applies no transaction atomically: its commits are receipted, results confirmed before the ACK
    m1, m2 = message(1, "orders"), message(2, "bad")
    landed = [Landed(m1, "orders", "orders-1a2b3c4d-00000001"), Landed(m2, "bad", "bad-1a2b3c4d-00000002")]
    confirmed, connection = commit(None, landed, [], [], [m1, m2], broker="rabbitmq")
    assert [(d, tx) for d, _, _, tx in connection.frames_sent] == [("/queue/audit", None)]
    assert (confirmed.to_stations, confirmed.failed) == (1, 1)  # AUDIT.Q is no STOMP destination
